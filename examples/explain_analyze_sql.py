"""EXPLAIN ANALYZE through SQL: plan, train, and print actuals beside the estimates.

    python examples/explain_analyze_sql.py [CATALOG]
"""

import sys

import airplan_qo as aq

catalog = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
STATEMENT = """
EXPLAIN ANALYZE (ALTERNATIVES 2)
TRAIN digits ON 10 CLIENTS
  WITH (alpha = 0.5, snr_db = 10, rounds = 40)
  USING TOPOLOGY ring, small_world(k = 4), complete
  USING SPARSITY IN (0.1, 1)
  SLA accuracy >= 0.9 * fc
"""
with aq.connect(catalog) as db:
    for result in db.sql(STATEMENT):
        print(result.text)
