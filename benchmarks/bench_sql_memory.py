"""Peak resident memory of the process under hostile catalog SQL, against the memory limit.

Each query runs in a fresh ``airplan sql --catalog :memory: --memory-limit LIMIT`` process (so
the peak is that query's alone); the process's peak RSS (``ru_maxrss`` of the child) is set
beside the peak of ``SELECT 1`` (the baseline: Python, the engine, an empty catalog). What
catalog SQL adds is the difference, which the limit is meant to bound (docs/sql.md, Security).
Prints one JSON object.

    OMP_NUM_THREADS=1 python benchmarks/bench_sql_memory.py --memory-limit 1GiB
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

from airplan_qo.catalog.sandbox import format_bytes, parse_memory_limit

QUERIES = {
    # a string doubled until DuckDB stops it: one value built on top of DuckDB's buffers
    "exploding_string_cte": "WITH RECURSIVE t(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM t "
                            "WHERE length(s) < 4000000000) SELECT max(length(s)) FROM t",
    "string_agg": "SELECT string_agg(range::VARCHAR, ',') FROM range(100000000)",
    "list": "SELECT list(range) FROM range(100000000)",
    "sorted_cross_join": "SELECT a.range AS a, b.range AS b FROM range(100000) a, "
                         "range(100000) b ORDER BY b, a DESC",
    "streamed_cross_join": "SELECT a.range AS a, b.range AS b FROM range(100000) a, "
                           "range(100000) b",
}


def peak(sql: str, limit: str) -> tuple[int, int]:
    """(peak RSS in bytes, exit status) of one ``airplan sql`` process running ``sql``."""
    proc = subprocess.run([sys.executable, "-m", "airplan_qo.cli", "sql", "--catalog",
                           ":memory:", "--memory-limit", limit, "--timeout", "120", sql],
                          capture_output=True, text=True, env={**os.environ})
    # the maximum over this process's children so far: the baseline runs first, and smaller
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-limit", default="1GiB")
    parser.add_argument("--query", choices=sorted(QUERIES), action="append",
                        help="one of the queries (repeatable; default: all, one process each)")
    args = parser.parse_args()
    limit = parse_memory_limit(args.memory_limit)
    names = args.query or list(QUERIES)
    if len(names) > 1:   # ru_maxrss of children is a running maximum: one process per query
        out = {}
        for name in names:
            proc = subprocess.run([sys.executable, __file__, "--memory-limit", args.memory_limit,
                                   "--query", name], capture_output=True, text=True, check=True)
            out.update(json.loads(proc.stdout)["queries"])
        base = out.pop("baseline_select_1")
    else:
        base_rss, _ = peak("SELECT 1", args.memory_limit)
        rss, status = peak(QUERIES[names[0]], args.memory_limit)
        print(json.dumps({"queries": {
            "baseline_select_1": base_rss,
            names[0]: {"peak_rss": rss, "exit_status": status}}}))
        return
    report = {"memory_limit": format_bytes(limit), "baseline_rss": format_bytes(base),
              "queries": {n: {"peak_rss": format_bytes(v["peak_rss"]),
                              "added_by_sql": format_bytes(v["peak_rss"] - base),
                              "added_over_limit": round((v["peak_rss"] - base) / limit, 3),
                              "exit_status": v["exit_status"]}
                          for n, v in out.items()}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
