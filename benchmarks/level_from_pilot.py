"""Would a pilot of a sparse plan tell where its average model levels off?

From the catalogs of evaluations that trained sparse plans on a data-hungry dataset (mnist1d by
default; `airplan evaluate --grid tails`, `hungry_tails`, ...): for every D-SGD plan at k = 1
over the air without a mixing-only tail, its average model's accuracy (``test_accuracy``) after
a quarter and after half of the round budget, over the complete graph's at the same round, as a
predictor of the same ratio at the end of the budget (each a 5-round mean). The complete graph's
curve is either the same seed's (``same_seed``: what a pilot racing both plans would see) or the
mean over the workload's seeds (``seed_mean``: what a pilot of the sparse plan alone, against a
known reference, would see). Per predictor: the correlation, a least-squares line, and its error
on each workload (clients, alpha, budget) left out of the fit, over all runs and near the
decision (final ratios 0.93-1.0, where `0.95 * fc` is decided).

    python benchmarks/level_from_pilot.py CATALOG [CATALOG ...] [--dataset mnist1d]
"""

from __future__ import annotations

import argparse
import json

import duckdb
import numpy as np

QUERY = """
SELECT w.n_clients, w.alpha, p.family, p.topology_params, p.weights_rule, e.exec_id,
       json_extract_string(e.options, '$.workload.seed') AS seed
FROM executions e JOIN plans p USING (plan_id)
JOIN planning_runs pr ON pr.planning_run_id = p.planning_run_id
JOIN workloads w ON w.workload_id = pr.workload_id
WHERE e.status = 'succeeded' AND p.k_ratio = 1 AND p.transport = 'ota'
  AND p.algorithm = 'dsgd' AND COALESCE(p.mix_rounds, 0) = 0 AND w.dataset = ?
"""


def curves(path: str, dataset: str) -> dict[tuple, dict[tuple, list[float]]]:
    """(clients, alpha, seed) -> (family, params, weights) -> the average model's curve."""
    con = duckdb.connect(path, read_only=True)
    try:
        con.execute("SET search_path = 'airplan,main'")
    except duckdb.Error:
        pass
    out: dict[tuple, dict[tuple, list[float]]] = {}
    for n, alpha, fam, params, rule, eid, seed in con.execute(QUERY, [dataset]).fetchall():
        avg = [r[0] for r in con.execute("SELECT test_accuracy FROM round_stats WHERE "
                                         "exec_id = ? ORDER BY round", [eid]).fetchall()]
        out.setdefault((int(n), alpha, seed), {})[(fam, params, rule)] = avg
    con.close()
    return out


def _at(curve, t: int) -> float:
    return float(np.mean(curve[max(0, t - 3):t + 2]))


def rows(paths: list[str], dataset: str, reference: str) -> list[dict]:
    out, seen = [], set()
    for path in paths:
        runs = curves(path, dataset)
        pooled: dict[tuple, list] = {}
        for (n, alpha, _), plans in runs.items():
            for (fam, _, _), v in plans.items():
                if fam == "complete":
                    pooled.setdefault((n, alpha, len(v)), []).append(v)
        for (n, alpha, seed), plans in runs.items():
            own = [v for (fam, _, _), v in plans.items() if fam == "complete"]
            if not own:
                continue
            budget = len(own[0])
            fc = (own[0] if reference == "same_seed"
                  else list(np.mean(np.array(pooled[(n, alpha, budget)]), axis=0)))
            for (fam, params, rule), v in plans.items():
                key = (n, alpha, seed, fam, params, rule, budget)
                if fam == "complete" or len(v) != budget or key in seen:
                    continue
                seen.add(key)
                out.append({"workload": (n, alpha, budget), "family": fam,
                            "quarter": _at(v, budget // 4) / _at(fc, budget // 4),
                            "half": _at(v, budget // 2) / _at(fc, budget // 2),
                            "final": _at(v, budget - 3) / _at(fc, budget - 3)})
    return out


def judge(data: list[dict], feature: str) -> dict:
    x = np.array([r[feature] for r in data])
    y = np.array([r["final"] for r in data])
    a = np.c_[np.ones_like(x), x]
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    errors = np.empty_like(y)
    groups = np.array([str(r["workload"]) for r in data])
    for g in set(groups):
        held = groups == g
        fit = np.linalg.lstsq(a[~held], y[~held], rcond=None)[0]
        errors[held] = y[held] - a[held] @ fit
    near = (y >= 0.93) & (y <= 1.0)
    return {"correlation": round(float(np.corrcoef(x, y)[0, 1]), 3),
            "line": [round(float(c), 3) for c in coef],
            "held_out_mean_abs_error": round(float(np.abs(errors).mean()), 4),
            "held_out_mean_abs_error_near_decision": round(float(np.abs(errors[near]).mean()), 4),
            "runs": int(len(y)), "near_decision": int(near.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalogs", nargs="+")
    parser.add_argument("--dataset", default="mnist1d")
    args = parser.parse_args()
    report = {}
    for reference in ("same_seed", "seed_mean"):
        data = rows(args.catalogs, args.dataset, reference)
        if len({str(r["workload"]) for r in data}) < 2:
            parser.error(f"the catalogs hold sparse plans and the complete graph of fewer than "
                         f"two {args.dataset} workloads: nothing to leave out")
        report[reference] = {feature: judge(data, feature) for feature in ("quarter", "half")}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
