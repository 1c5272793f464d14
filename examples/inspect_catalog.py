"""Inspect the catalog with plain DuckDB: estimated vs actual, and per-round curves.

Runs one short training (so the catalog has something to show), closes the engine's
connection, then opens the file read-only with the duckdb package alone, as any outside tool
would (`duckdb -readonly airplan.duckdb` works the same way).

    python examples/inspect_catalog.py [CATALOG]   (default: ./example-catalog.duckdb)
"""

import sys

import duckdb

import airplan_qo as aq

path = sys.argv[1] if len(sys.argv) > 1 else "example-catalog.duckdb"
with aq.connect(path) as db:
    db.sql("TRAIN digits ON 8 CLIENTS WITH (alpha = 1.0, rounds = 25) "
           "USING TOPOLOGY small_world(k = 4) USING SPARSITY 1 FALLBACK AUTO")

con = duckdb.connect(path, read_only=True)
print("estimated vs actual:")
for row in con.sql("SELECT metric, round(estimated, 3), round(actual, 3), censored "
                   "FROM v_estimate_vs_actual ORDER BY exec_id, metric").fetchall():
    print("  ", row)
print("per-round curve of the last execution:")
for row in con.sql("SELECT round, round(test_accuracy, 3) AS acc, round(consensus_distance, 4) "
                   "FROM round_stats WHERE exec_id = (SELECT max(exec_id) FROM executions) "
                   "ORDER BY round LIMIT 10").fetchall():
    print("  ", row)
con.close()
