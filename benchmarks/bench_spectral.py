"""Spectral statistics at scale: small_world(k=6) and ring at N in {1e3, 1e4, 1e5} (up to 1e6).

Each configuration runs in a fresh subprocess so its peak memory (ru_maxrss) is its own.
Prints one JSON document: per configuration and eigensolver the seconds to build the graph and
W, to compute the spectra, to colour G^2, the method the spectra report, and peak RSS in MiB;
then, per family and N, each solver's spectra time as a ratio to the default solver's and the
largest relative difference of its lambda2 / normalised lambda2 / mixing gap from the default's.

    python benchmarks/bench_spectral.py [--sizes 1000 10000 100000 1000000]
        [--families small_world ring] [--solvers default arpack amg] [--timeout 900]

Solvers: ``default`` is what the planner runs (Lanczos, multigrid LOBPCG for ill-conditioned
matrices when pyamg is installed, ARPACK as the fallback); ``arpack`` forces the fallback alone
(ARPACK, then Jacobi-preconditioned LOBPCG: the solver of earlier versions); ``amg`` forces
LOBPCG with pyamg's smoothed-aggregation preconditioner for every lambda2 (largest eigenvalues
by ARPACK). Targets on a 2-core CPU: small_world at N = 1e5 under 2 s of spectra, at N = 1e6
under 30 s.

Baseline: for each graph whose spectra are not closed-form, the same process also times a plain
``scipy.sparse.linalg.eigsh(L, which='SM')`` of its Laplacian (the six smallest eigenvalues to
machine precision, ARPACK's defaults; it gives lambda2(L) alone, where the spectra are lambda2 of
L and of the normalised Laplacian and the gap of W), before the spectra and on the same graph,
and reports ``spectra_over_eigsh`` = spectra seconds / eigsh seconds (target: at most 1.5 for
small_world at N = 1e5); ``--no-baseline`` skips it.
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
SOLVERS = ("default", "arpack", "amg")


def _force(solver: str) -> None:
    """Route every iterative eigenvalue of airplan_qo.plans.spectra to one solver."""
    from airplan_qo.plans import spectra

    if solver == "arpack":
        spectra._lanczos_extremes = lambda m, null, **kw: (None, None, False)
    elif solver == "amg":
        spectra._lanczos_extremes = lambda m, null, **kw: (None, None, null is not None)


def run_one(family: str, n: int, seed: int, solver: str = "default",
            baseline: bool = True) -> dict:
    from airplan_qo.plans.families import build_graph
    from airplan_qo.plans.graphs import laplacian
    from airplan_qo.plans.mixing import WEIGHTS
    from airplan_qo.plans.schedule import ota_schedule
    from airplan_qo.plans.spectra import _closed_form, spectral_stats

    _force(solver)
    t0 = time.perf_counter()
    graph = build_graph(family, n, seed=seed, **PARAMS.get(family, {}))
    w = WEIGHTS.get("metropolis_hastings")(graph)
    t1 = time.perf_counter()
    build_s = t1 - t0
    extra = {}
    if baseline and _closed_form(graph, family) is None:
        import numpy as np
        import scipy.sparse.linalg as sla

        lap = laplacian(graph)
        e0 = time.perf_counter()
        vals = np.sort(sla.eigsh(lap, which="SM", return_eigenvectors=False))
        extra["eigsh_sm_s"] = round(time.perf_counter() - e0, 3)
        extra["eigsh_lambda2"] = float(vals[1])
        t1 = time.perf_counter()
    stats = spectral_stats(graph, w, family=family)
    t2 = time.perf_counter()
    if "eigsh_sm_s" in extra:
        extra["spectra_over_eigsh"] = round((t2 - t1) / max(extra["eigsh_sm_s"], 1e-9), 2)
    schedule = ota_schedule(graph)
    t3 = time.perf_counter()
    return {
        "family": family, "n": n, "solver": solver, "build_s": round(build_s, 3),
        "spectra_s": round(t2 - t1, 3), "schedule_s": round(t3 - t2, 3),
        "total_s": round(build_s + t3 - t1, 3), "method": stats.method,
        "lambda2_laplacian": stats.lambda2_laplacian,
        "lambda2_normalized": stats.lambda2_normalized, "mixing_gap": stats.mixing_gap,
        "slots_per_round": schedule.slots_per_round,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        **extra,
    }


def compare(rows: list[dict]) -> list[dict]:
    """Per family and N: each solver's spectra time over the default's, and how far its values
    are from the default's (largest relative difference)."""
    out = []
    for row in rows:
        if row["solver"] == "default" or "spectra_s" not in row:
            continue
        base = next((r for r in rows if r["family"] == row["family"] and r["n"] == row["n"]
                     and r["solver"] == "default" and "spectra_s" in r), None)
        if base is None:
            continue
        diff = max(abs(row[k] - base[k]) / abs(base[k])
                   for k in ("lambda2_laplacian", "lambda2_normalized", "mixing_gap"))
        out.append({"family": row["family"], "n": row["n"], "solver": row["solver"],
                    "method": row["method"], "default_method": base["method"],
                    "spectra_ratio": round(row["spectra_s"] / max(base["spectra_s"], 1e-9), 2),
                    "max_rel_diff": float(f"{diff:.2e}")})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000],
                        help="numbers of nodes (up to 1000000 and beyond)")
    parser.add_argument("--families", nargs="+", default=["small_world", "ring"])
    parser.add_argument("--solvers", nargs="+", default=["default", "arpack"], choices=SOLVERS)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one configuration may run before it is reported as such")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-baseline", action="store_true",
                        help="do not time the plain eigsh(L, which='SM') baseline")
    parser.add_argument("--one", nargs=3, metavar=("FAMILY", "N", "SOLVER"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if any(n < 2 for n in args.sizes):
        parser.error("--sizes must be integers >= 2")
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.seed, args.one[2],
                                 baseline=not args.no_baseline)))
        return
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    rows = []
    for family in args.families:
        for n in args.sizes:
            for solver in args.solvers:
                cmd = [sys.executable, __file__, "--one", family, str(n), solver,
                       "--seed", str(args.seed)] + (["--no-baseline"] if args.no_baseline
                                                    or solver != "default" else [])
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                         check=True, timeout=args.timeout)
                    rows.append(json.loads(out.stdout))
                except subprocess.TimeoutExpired:
                    rows.append({"family": family, "n": n, "solver": solver,
                                 "timed_out_s": args.timeout})
                print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "spectral", "load_avg": os.getloadavg(), "results": rows,
                      "spectra_over_eigsh": [
                          {k: r[k] for k in ("family", "n", "spectra_s", "eigsh_sm_s",
                                             "spectra_over_eigsh")}
                          for r in rows if "spectra_over_eigsh" in r],
                      "against_default": compare(rows)}, indent=2))


if __name__ == "__main__":
    main()
