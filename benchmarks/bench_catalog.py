"""Catalog bulk I/O: write and read back per-client Count-Min sketches.

Measures ``Catalog.write_sketches`` / ``Catalog.read_sketches`` (Arrow in both directions) and,
for comparison, a naive ``executemany`` insert plus a ``fetchall`` read on the same table. The
naive path is measured on ``--naive-clients`` sketches and extrapolated linearly to ``--clients``
unless ``--naive-clients`` equals ``--clients``. Prints one JSON object.

    python benchmarks/bench_catalog.py --clients 2000 --depth 5 --width 55
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

import duckdb
import numpy as np

from airplan_qo.catalog.store import Catalog


def _bench_arrow(path: Path, counts: np.ndarray, n_records: np.ndarray,
                 repeats: int) -> tuple[list[float], list[float]]:
    writes, reads = [], []
    with Catalog.open(path) as cat:
        for version in range(1, repeats + 1):
            t0 = time.perf_counter()
            cat.write_sketches(1, version, counts, n_records, hash_seed=12345)
            t1 = time.perf_counter()
            got = cat.read_sketches(1, version)
            t2 = time.perf_counter()
            if not np.array_equal(got.counts, counts):
                raise SystemExit("sketches did not round-trip")
            writes.append(t1 - t0)
            reads.append(t2 - t1)
    return writes, reads


def _bench_naive(path: Path, counts: np.ndarray, n_records: np.ndarray) -> tuple[float, float]:
    """executemany insert with Python lists, then fetchall and a Python-level rebuild."""
    n, depth, width = counts.shape
    rows = [(2, 1, c, int(n_records[c]), depth, width, 12345, counts[c].reshape(-1).tolist(), 0.0)
            for c in range(n)]
    con = duckdb.connect(str(path))
    try:
        t0 = time.perf_counter()
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO client_sketches (workload_id, stats_version, client, n_records, depth, "
            "width, hash_seed, counts, noise_sigma) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute("COMMIT")
        t1 = time.perf_counter()
        fetched = con.execute("SELECT counts FROM client_sketches WHERE workload_id = 2 "
                              "ORDER BY client").fetchall()
        back = np.array([r[0] for r in fetched], dtype=np.int32).reshape(n, depth, width)
        t2 = time.perf_counter()
    finally:
        con.close()
    if not np.array_equal(back, counts):
        raise SystemExit("naive path did not round-trip")
    return t1 - t0, t2 - t1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--width", type=int, default=55)
    parser.add_argument("--repeats", type=int, default=5, help="timed Arrow round trips")
    parser.add_argument("--naive-clients", type=int, default=200,
                        help="sketches for the executemany comparison (extrapolated)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    counts = rng.integers(0, 1000, size=(args.clients, args.depth, args.width), dtype=np.int32)
    n_records = rng.integers(1, 5000, size=args.clients)
    naive_n = min(args.naive_clients, args.clients)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        writes, reads = _bench_arrow(path, counts, n_records, args.repeats)
        naive_write, naive_read = _bench_naive(path, counts[:naive_n], n_records[:naive_n])

    scale = args.clients / naive_n
    write_s, read_s = statistics.median(writes), statistics.median(reads)
    naive_write_full, naive_read_full = naive_write * scale, naive_read * scale
    result = {
        "clients": args.clients, "depth": args.depth, "width": args.width,
        "repeats": args.repeats,
        "write_s": round(write_s, 4), "read_s": round(read_s, 4),
        "write_read_s": round(write_s + read_s, 4),
        "first_write_s": round(writes[0], 4), "first_read_s": round(reads[0], 4),
        "naive_clients_measured": naive_n,
        "naive_write_s_measured": round(naive_write, 4),
        "naive_read_s_measured": round(naive_read, 4),
        "naive_extrapolated": naive_n != args.clients,
        "naive_write_s": round(naive_write_full, 4), "naive_read_s": round(naive_read_full, 4),
        "write_speedup": round(naive_write_full / write_s, 1),
        "read_speedup": round(naive_read_full / read_s, 1),
        "target_write_read_under_1s": write_s + read_s < 1.0,
        "duckdb": duckdb.__version__, "python": platform.python_version(),
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
