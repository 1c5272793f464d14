"""What recording a trained run costs the ``airplan evaluate`` process (the one catalog writer).

Trains one run of a workload once (``--clients``, ``--rounds``), then records it ``--runs`` times
with :func:`~airplan_qo.runtime.execution.record_trained` (execution row, ``round_stats``,
``feedback``), alternately each in a transaction of its own and all of them in one transaction,
and all of them with :func:`~airplan_qo.runtime.execution.record_trained_batch` (one
transaction, three inserts), as ``--workers`` evaluations record a workload whose runs are all
back. Prints one JSON object with the milliseconds per recorded run of each way (median over
``--repeats``).

    python benchmarks/bench_record.py                       # digits, N = 20, 40 rounds, 48 runs
    python benchmarks/bench_record.py --rounds 100 --runs 96 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--runs", type=int, default=48, help="runs recorded per timing")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import airplan_qo as aq
    from airplan_qo.runtime.execution import prepare, record_trained, record_trained_batch, train

    own, shared, batch = [], [], []
    with tempfile.TemporaryDirectory(prefix="airplan-bench-record-") as tmp:
        with aq.connect(Path(tmp) / "record.duckdb") as db:
            w = aq.Workload(dataset="digits", clients=args.clients, alpha=0.5, snr_db=10,
                            rounds=args.rounds)
            result = db.plan(w, topologies=["ring"], sparsity=[1.0], fallback="complete")
            job, options, _ = prepare(db.catalog, result, stop_at_target=False,
                                      reoptimize=False)
            run, wall = train(job)
            for _ in range(args.repeats):
                start = time.perf_counter()
                for _ in range(args.runs):
                    record_trained(db.catalog, job, options, run, wall)
                own.append((time.perf_counter() - start) / args.runs)
                start = time.perf_counter()
                with db.catalog.transaction():
                    for _ in range(args.runs):
                        record_trained(db.catalog, job, options, run, wall)
                shared.append((time.perf_counter() - start) / args.runs)
                start = time.perf_counter()
                record_trained_batch(db.catalog, [(job, options, run, wall)] * args.runs)
                batch.append((time.perf_counter() - start) / args.runs)
    print(json.dumps({
        "benchmark": "record_trained_ms_per_run", "clients": args.clients,
        "rounds": args.rounds, "runs": args.runs, "repeats": args.repeats,
        "own_transaction_ms": round(1e3 * statistics.median(own), 2),
        "one_transaction_ms": round(1e3 * statistics.median(shared), 2),
        "batch_ms": round(1e3 * statistics.median(batch), 2),
        "ratio": round(statistics.median(shared) / statistics.median(own), 3),
        "batch_ratio": round(statistics.median(batch) / statistics.median(own), 3),
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
        "python": platform.python_version()}, indent=2))


if __name__ == "__main__":
    main()
