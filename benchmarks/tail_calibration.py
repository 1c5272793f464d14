"""How well the planner's P(meets SLA) for plans with a mixing-only tail matches what the tails
did, from the catalog of an evaluation that trained them (`airplan evaluate --grid tails`, ...).

For every planned tail (``plans.mix_rounds`` > 0) that was trained, grouped by workload, SLA,
topology family and tail length: the planned P(meets SLA) and its average-model part
(``plans.terms``: ``p_meets``, ``p_meets_average_model``), the seeds whose clients reached the
target as `airplan evaluate` judges it (the smoothed crossing of the clients' mean accuracy
against the SLA with ``fc`` the complete graph's measured mean final accuracy in that workload),
and the average model's accuracy when the training ended (the round before the tail) over
``fc``. Then the same pooled into bins of planned P: the share of seeds that reached the target
in each bin, against the bin's mean planned P (a calibrated planner has them equal), for the
tails on the plans' own topologies, for those on the complete graph (``plans.mix_on``) and, for
comparison, for the sparse plans without a tail in the same catalogs.

    python benchmarks/tail_calibration.py CATALOG [CATALOG ...]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import duckdb

from airplan_qo.evaluation.metrics import outcome_from_curve, measured_target
from airplan_qo.plans.sla import parse_sla

QUERY = """
SELECT w.dataset, w.n_clients, w.alpha, pr.sla, p.family, p.topology_params, p.mix_rounds,
       p.terms, e.exec_id, pr.workload_id, {mix_on} AS mix_on
FROM executions e JOIN plans p USING (plan_id)
JOIN planning_runs pr ON pr.planning_run_id = p.planning_run_id
JOIN workloads w ON w.workload_id = pr.workload_id
WHERE e.status = 'succeeded' AND p.k_ratio = 1 AND p.transport = 'ota'
  AND p.algorithm = 'dsgd'
"""

BINS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0001)


def curve(con, exec_id: int, column: str) -> list:
    return [r[0] for r in con.execute(
        f"SELECT {column} FROM round_stats WHERE exec_id = ? ORDER BY round", [exec_id]).fetchall()]


def groups(path: str, plain: bool = False) -> list[dict]:
    con = duckdb.connect(path, read_only=True)
    try:
        con.execute("SET search_path = 'airplan,main'")
    except duckdb.Error:
        pass
    try:      # catalogs before version 8 have no tails on the complete graph
        rows = con.execute(QUERY.format(mix_on="p.mix_on")).fetchall()
    except duckdb.Error:
        rows = con.execute(QUERY.format(mix_on="NULL")).fetchall()
    fc: dict[tuple, list[float]] = defaultdict(list)
    for ds, n, alpha, sla, fam, params, m, terms, eid, wid, on in rows:
        if fam == "complete":
            fc[(ds, n, alpha, sla)].append(curve(con, eid, "client_acc_mean")[-1])
    out: dict[tuple, dict] = {}
    for ds, n, alpha, sla, fam, params, m, terms, eid, wid, on in rows:
        if fam == "complete" or (ds, n, alpha, sla) not in fc:
            continue
        if not m and not plain:
            continue
        t = json.loads(terms) if isinstance(terms, str) else dict(terms or {})
        fc_acc = sum(fc[(ds, n, alpha, sla)]) / len(fc[(ds, n, alpha, sla)])
        target = measured_target(parse_sla(sla), fc_acc)
        clients = curve(con, eid, "client_acc_mean")
        reached, _, _ = outcome_from_curve(clients, [0.0] * len(clients), 0.0, target)
        trained = int(t.get("training_rounds") or len(clients) - int(m or 0))
        avg = curve(con, eid, "test_accuracy")
        key = (ds, int(n), alpha, sla, fam, params, int(m or 0), on)
        g = out.setdefault(key, {"catalog": path, "dataset": ds, "clients": int(n),
                                 "alpha": alpha, "sla": sla, "plan": f"{fam} {params or ''}".strip(),
                                 "mix_rounds": int(m or 0), "mix_on": on,
                                 "rounds": len(clients),
                                 "p_meets": t.get("p_meets"),
                                 "p_meets_average_model": t.get("p_meets_average_model"),
                                 "seeds": 0, "reached": 0, "avg_at_training_end_over_fc": []})
        g["seeds"] += 1
        g["reached"] += int(reached)
        g["avg_at_training_end_over_fc"].append(avg[trained - 1] / fc_acc)
    con.close()
    for g in out.values():
        a = g["avg_at_training_end_over_fc"]
        g["avg_at_training_end_over_fc"] = round(sum(a) / len(a), 3)
    return list(out.values())


def calibration(rows: list[dict]) -> list[dict]:
    bins = []
    for lo, hi in zip(BINS, BINS[1:]):
        sel = [g for g in rows if g["p_meets"] is not None and lo <= g["p_meets"] < hi]
        seeds = sum(g["seeds"] for g in sel)
        if seeds:
            bins.append({"planned_p": f"[{lo:g}, {min(hi, 1):g})", "plans": len(sel),
                         "mean_planned_p": round(sum(g["p_meets"] * g["seeds"] for g in sel)
                                                 / seeds, 3),
                         "seeds": seeds, "reached": round(sum(g["reached"] for g in sel)
                                                         / seeds, 3)})
    return bins


def plain_by_clients(rows: list[dict]) -> dict:
    """The plans without a tail, one SLA per workload: the average model's accuracy after the
    whole budget over fc, per (dataset, alpha, plan) and number of clients (with the budget)."""
    out: dict[str, dict] = defaultdict(dict)
    seen = set()
    for g in sorted(rows, key=lambda g: (g["dataset"], str(g["alpha"]), g["plan"], g["clients"])):
        key = (g["catalog"], g["dataset"], g["clients"], g["alpha"], g["plan"], g["rounds"])
        if g["mix_rounds"] or key in seen:
            continue
        seen.add(key)
        out[f"{g['dataset']} alpha={g['alpha']} {g['plan']}"][
            f"N={g['clients']}, {g['rounds']} rounds"] = g["avg_at_training_end_over_fc"]
    return dict(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalogs", nargs="+")
    args = parser.parse_args()
    every = [g for path in args.catalogs for g in groups(path, plain=True)]
    rows = [g for g in every if g["mix_rounds"]]
    by_family: dict[str, list] = defaultdict(list)
    for g in rows:
        if g["p_meets"] is not None and g["p_meets"] >= 0.8:
            by_family[g["plan"].split()[0] + (" on complete" if g["mix_on"] else "")].append(g)
    print(json.dumps({
        "tails": sorted(rows, key=lambda g: (g["catalog"], g["clients"], g["sla"], g["plan"])),
        "calibration": calibration([g for g in rows if not g["mix_on"]]),
        "calibration_tails_on_the_complete_graph": calibration([g for g in rows if g["mix_on"]]),
        "calibration_without_tails": calibration([g for g in every if not g["mix_rounds"]]),
        "plain_average_model_over_fc_by_clients": plain_by_clients(every),
        "planned_p_at_least_0.8_by_family": {
            fam: {"plans": len(v), "mean_planned_p": round(sum(g["p_meets"] for g in v) / len(v), 3),
                  "seeds_reached": f"{sum(g['reached'] for g in v)}/{sum(g['seeds'] for g in v)}"}
            for fam, v in sorted(by_family.items())}}, indent=1, default=str))


if __name__ == "__main__":
    main()
