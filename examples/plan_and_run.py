"""Plan a workload with the Python API, look at the plan, then train it and compare.

    python examples/plan_and_run.py [CATALOG]     (default: a throwaway in-memory catalog)
"""

import sys

import airplan_qo as aq

catalog = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
with aq.connect(catalog) as db:
    workload = aq.Workload(dataset="digits", clients=10, alpha=0.5, snr_db=10, rounds=40)
    db.analyze(workload)                       # sketch-based heterogeneity statistics
    result = db.plan(workload, sla="accuracy >= 0.9 * fc", sparsity=[0.1, 1.0])
    print(result.explain())
    report = db.execute(result)                # trains the chosen plan, records everything
    print(f"\nexecution {report.exec_id}: {report.result.status}, "
          f"final accuracy {report.result.final_accuracy:.3f}")
    for fb in report.feedback:
        print(f"  {fb['metric']:<13} estimated {fb['estimated']!s:<22} actual {fb['actual']}")
