"""Dropout as a decision of the estimator, and re-optimisation during a run.

    python examples/dropout_reoptimization.py [CATALOG]   (default: an in-memory catalog)

Part 1 plans the paper's setting (N = 50, alpha = 0.5, SNR 10 dB, small-world vs clustered) at
client dropout 0, 0.1, 0.2 and 0.3. The dsgd estimator sees dropout and link truncation through
p_random, the expected contraction of the random mixing matrix of each topology; nothing in the
planner names a family. The table shows what it decides and why.

Part 2 trains a ring on nearly one-class-per-client data, which progresses far slower than
predicted: the monitor fires, the run is re-planned with the observed statistics among plans at
least as well connected, rewired without losing model state, and EXPLAIN ANALYZE shows the event.
"""

import sys

import attrs

import airplan_qo as aq

catalog = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
with aq.connect(catalog) as db:
    print("Part 1: small-world vs clustered under dropout (N = 50, alpha = 0.5, SNR 10 dB)")
    print(f"{'dropout':>7}  {'family':<12} {'best plan':<58} {'rounds':>6} {'channel uses':>13} "
          f"{'p':>7} {'p_random':>8}")
    for dropout in (0.0, 0.1, 0.2, 0.3):
        w = aq.Workload(dataset="digits", clients=50, alpha=0.5, snr_db=10, dropout=dropout)
        result = db.plan(w, topologies=["small_world", "clustered"], estimator="dsgd")
        best = {}
        for c in result.candidates:
            fam = c.plan.topology.family
            if c.feasible and fam not in best:
                best[fam] = c
        for fam, c in sorted(best.items()):
            t = c.cost.estimate.terms
            mark = "  <- chosen" if c is result.chosen else ""
            print(f"{dropout:>7.1f}  {fam:<12} {c.plan.label():<58} {c.cost.rounds:>6.0f} "
                  f"{c.cost.total():>13.0f} {t['p']:>7.4f} {t['p_random']:>8.4f}{mark}")

    print("\nPart 2: a run that falls behind its prediction is re-planned and rewired")
    w = aq.Workload(dataset="digits", clients=16, alpha=0.05, rounds=40, seed=1)
    result = db.plan(w, estimator="dsgd",
                     topologies=["ring", "small_world", "exponential", "complete"],
                     sparsity=[1.0], weights=["metropolis_hastings"])
    ring = next(c for c in result.candidates if c.plan.topology.family == "ring")
    result = attrs.evolve(result, chosen=ring)        # start from the sparsest plan on purpose
    report = db.execute(result)
    print(result.explain(analyze=report.analyze_fields()))
    print("\ncatalog:")
    for row in db.catalog.query(
            "SELECT event_id, exec_id, round, trigger, old_plan_id, new_plan_id, planning_run_id, "
            "json_extract(observed, '$.dropout_rate') AS dropout, "
            "json_extract(observed, '$.link_drop_rate') AS link_drop "
            "FROM airplan.reoptimizations ORDER BY event_id"):
        print(" ", row)
