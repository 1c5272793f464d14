"""Measure the average model's level at the end of training on evaluation catalogs, and fit the
tails' level model (costmodels/tail_level.py) on it.

Every run ``airplan evaluate`` trained of a plan without a tail (``mix_rounds`` 0; over the air,
D-SGD or CHOCO) gives two
rows: the average model's accuracy (centred moving average over 3 evaluations, as the SLA's
crossing is judged) after ``rounds - 2`` and after ``0.8 rounds`` training rounds, over ``fc``,
the fully connected plan's mean final accuracy over the workload's seeds (the SLA's ``fc``), with
the inputs the planner predicts that ratio from (:class:`~airplan_qo.costmodels.tail_level.
LevelInputs`, from re-planning the workload). The two points are where a tail on the complete
graph (2 rounds) and a plan's own tail (about a fifth of the budget) start.

    python -m airplan_qo.evaluation.tail_level_fit CATALOG [CATALOG ...] [--write] [--json OUT]

prints the fitted constants and their calibration under leave-one-workload-out cross-validation
(the share of runs whose ratio cleared 0.9, 0.95 and 0.97 against the predicted probability), and
with ``--write`` stores them in the shipped average model's fit (``time_to_target_avg.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import duckdb
import numpy as np

from ..costmodels.tail_level import end_level, fit_level, level_above
from ..costmodels.time_to_target import AVERAGE_MODEL_FILE, TimeToTargetEstimator
from ..plans.sla import SMOOTHING_WINDOW

QUERY = """
SELECT e.exec_id, e.options, p.family, p.topology_params, p.weights_rule, p.k_ratio,
       p.algorithm, p.transport, c.average, c.clients
FROM executions e JOIN plans p USING (plan_id)
JOIN (SELECT exec_id, list(test_accuracy ORDER BY round) AS average,
             list(client_acc_mean ORDER BY round) AS clients
      FROM round_stats GROUP BY exec_id) c USING (exec_id)
WHERE e.status = 'succeeded' AND COALESCE(p.mix_rounds, 0) = 0 AND p.transport = 'ota'
  AND p.algorithm IN ('dsgd', 'choco')
"""

#: The operators whose runs the rows are measured on (over the air, D-SGD and CHOCO: the
#: candidates the data-hungry grids train; a tail of another operator takes their level).
LEVEL_ALGORITHMS = ("dsgd", "choco")

#: Topology parameters a catalog records that the planner derives (not a user's to give).
DERIVED_PARAMS = frozenset({"cliques", "residual", "stats"})
#: The workload parameters that tell its seeds apart (the runs of all seeds share one fc).
SEED_PARAMS = ("seed", "topology_seed")
#: Where the rows sample a run: the last training round of a tail on the complete graph, and of
#: an own tail of about a fifth of the budget.
SAMPLE_POINTS = (lambda rounds: rounds - 2, lambda rounds: round(0.8 * rounds))


def _smoothed(curve: Sequence[float | None], t: int) -> float | None:
    """The centred moving average of ``curve`` (one value a round) at round t (1-based) over
    the SLA's :data:`~airplan_qo.plans.sla.SMOOTHING_WINDOW` rounds: t - 1, t and t + 1."""
    half = SMOOTHING_WINDOW // 2
    vals = [a for a in curve[max(t - 1 - half, 0):t + half] if a is not None and math.isfinite(a)]
    return sum(vals) / len(vals) if vals else None


def _spec(family: str, params: str | None) -> str:
    p = {k: v for k, v in json.loads(params or "{}").items() if k not in DERIVED_PARAMS}
    return f"{family}({', '.join(f'{k}={v}' for k, v in sorted(p.items()))})" if p else family


def _runs(path: str) -> list[dict]:
    con = duckdb.connect(path, read_only=True)
    try:
        out = []
        for (eid, options, fam, params, rule, k, alg, transport, average,
             clients) in con.execute(QUERY).fetchall():
            o = json.loads(options or "{}")
            ev = o.get("evaluation")
            if not ev or "workload" not in o:
                continue
            out.append({"key": ev.get("cache_key") or f"{path}:{eid}", "dataset": o["dataset"],
                        "clients": int(o["clients"]), "workload": o["workload"],
                        "family": fam, "spec": _spec(fam, params), "weights": rule,
                        "k": float(k), "algorithm": alg, "transport": transport,
                        "average": list(average), "clients_acc": list(clients)})
        return out
    finally:
        con.close()


def workload_key(dataset: str, clients: int, params: Mapping) -> str:
    """The key of a workload's rows: its dataset, clients and parameters less its seeds."""
    w = {k: v for k, v in params.items() if k not in SEED_PARAMS}
    return json.dumps([dataset, int(clients), w], sort_keys=True, default=str)


def _group_key(run: Mapping) -> str:
    return workload_key(run["dataset"], run["clients"], run["workload"])


def grid_workload_keys(grid) -> set[str]:
    """The keys (:func:`workload_key`) of an evaluation grid's workloads."""
    out = set()
    for ws in grid.workloads:
        w = ws.for_seed(0)
        out.add(workload_key(w.dataset, w.clients, w.params()))
    return out


@contextlib.contextmanager
def level_fit_in_use(constants: Mapping[str, float]):
    """Plan with these ``level.*`` constants in place of the shipped ones for the duration of
    the block (the ``ttt`` estimator registered anew with them, and the original again after:
    each registration empties the plan cache)."""
    from ..costmodels import ESTIMATORS

    original = ESTIMATORS.get("ttt")
    ESTIMATORS.register("ttt", attrs.evolve(original, level_constants=dict(constants)),
                        replace=True)
    try:
        yield
    finally:
        ESTIMATORS.register("ttt", original, replace=True)


def level_rows(paths: Sequence[str], *, progress=None) -> list[dict]:
    """The measured rows (module docstring) of every evaluation catalog in ``paths``: each with
    ``inputs`` (a :class:`LevelInputs`), ``r``, the ``workload`` it belongs to, its plan's
    ``family`` and its ``seed``."""
    from .. import connect
    from ..plans.workload import Workload

    runs, seen = [], set()
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"no catalog at {path}")
        for r in _runs(path):
            if r["key"] not in seen:
                seen.add(r["key"])
                runs.append(r)
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        groups[_group_key(r)].append(r)
    est = TimeToTargetEstimator()
    rows = []
    with connect(":memory:") as db:
        for i, (gkey, members) in enumerate(sorted(groups.items())):
            fcs = [m["clients_acc"][-1] for m in members
                   if m["family"] == "complete" and m["k"] == 1.0
                   and m["clients_acc"] and m["clients_acc"][-1] is not None]
            sparse = [m for m in members if m["family"] != "complete"]
            if not fcs or not sparse:
                continue
            fc = float(np.mean(fcs))
            first = members[0]
            w = Workload(dataset=first["dataset"], clients=first["clients"],
                         **first["workload"])
            specs = sorted({m["spec"] for m in sparse})
            res = db.plan(w, sla="accuracy >= 0.95 * fc", topologies=specs + ["complete"],
                          weights=sorted({m["weights"] for m in sparse} - {"prescribed"})
                          or ["metropolis_hastings"],
                          sparsity=sorted({m["k"] for m in sparse}),
                          transports=sorted({m["transport"] for m in sparse}),
                          algorithms=["auto"], fallback="complete", mix_rounds=0)
            ctx = res.context
            budget = int(w.rounds)
            by_plan = {}
            for c in res.candidates:
                p = c.plan
                if p.transport == "ota" and p.effective_algorithm in LEVEL_ALGORITHMS:
                    by_plan[(p.topology.family, float(p.k_ratio), p.topology.weights)] = c
            for m in sparse:
                c = by_plan.get((m["family"], m["k"], m["weights"]))
                if c is None:
                    continue
                ref = est.reference_terms(ctx, c.stats.spectra.n_nodes, c.plan.channel)
                for point in SAMPLE_POINTS:
                    t = point(budget)
                    a = _smoothed(m["average"], t)
                    if a is None or len(m["average"]) < t:
                        continue
                    rows.append({"workload": gkey, "family": m["family"],
                                 "seed": m["workload"].get("seed"), "r": a / fc,
                                 "inputs": est.level_inputs(ctx, c.plan, c.stats, ref, t,
                                                            w.dataset)})
            if progress:
                progress(i + 1, len(groups))
    return rows


def cross_validated(rows: Sequence[Mapping], thresholds=(0.9, 0.95, 0.97)) -> dict:
    """Leave-one-workload-out: each workload's rows predicted by the fit on the others; per
    threshold, bins of the predicted P(r >= threshold) with the share of rows that cleared it."""
    by: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by[r["workload"]].append(i)
    mean = np.zeros(len(rows))
    sd = np.zeros(len(rows))
    for wkey, idx in by.items():
        held = set(idx)
        c = fit_level([r for i, r in enumerate(rows) if i not in held])
        for i in idx:
            mu, s, _ = end_level(c, rows[i]["inputs"])
            mean[i], sd[i] = mu, s
    y = np.array([math.log(r["r"]) for r in rows])
    out = {"rows": len(rows), "workloads": len(by),
           "residual_sd": float(np.std(y - mean)), "bins": {}}
    edges = (0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 1.0001)
    datasets = sorted({r["inputs"].dataset for r in rows})
    for scope in ["all"] + datasets:
        keep = np.array([scope == "all" or r["inputs"].dataset == scope for r in rows])
        for thr in thresholds:
            p = np.array([level_above(c, m, s, thr) for m, s in zip(mean, sd)])
            hit = y >= math.log(thr)
            out["bins"][f"{scope} {thr}"] = [
                {"lo": lo, "hi": min(hi, 1.0), "n": int(sel.sum()),
                 "mean_p": float(p[sel].mean()), "cleared": float(hit[sel].mean())}
                for lo, hi in zip(edges, edges[1:])
                if (sel := keep & (p >= lo) & (p < hi)).any()]
    return out


def write(constants: Mapping[str, float], sources: Sequence[str], path: Path | None = None
          ) -> Path:
    """Store the ``level.*`` constants in the average model's fit file (replacing earlier ones)."""
    path = path or Path(__file__).resolve().parent.parent / "costmodels" / AVERAGE_MODEL_FILE
    fit = json.loads(path.read_text())
    fit["constants"] = {k: v for k, v in fit["constants"].items() if not k.startswith("level.")}
    fit["constants"].update(constants)
    fit["level_source"] = "python -m airplan_qo.evaluation.tail_level_fit " + " ".join(
        Path(s).name for s in sources)
    path.write_text(json.dumps(fit, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m airplan_qo.evaluation.tail_level_fit",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("catalogs", nargs="+", help="catalogs of `airplan evaluate` runs")
    ap.add_argument("--write", action="store_true",
                    help=f"store the fit in the shipped {AVERAGE_MODEL_FILE}")
    ap.add_argument("--json", help="write the rows' summary, fit and cross-validation here")
    ap.add_argument("--no-cv", action="store_true", help="skip the cross-validation")
    args = ap.parse_args(argv)
    try:
        rows = level_rows(args.catalogs, progress=lambda i, n: print(
            f"\rre-planned {i}/{n} workloads", end="", file=sys.stderr, flush=True))
    except (FileNotFoundError, duckdb.Error) as e:
        print(f"\nerror: {e}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    if not rows:
        print("error: no run without a tail and with a measured fully connected plan in "
              "these catalogs", file=sys.stderr)
        return 2
    constants = fit_level(rows)
    print(f"{len(rows)} rows from {len({r['workload'] for r in rows})} workloads")
    for k, v in sorted(constants.items()):
        print(f"  {k} = {v:.4f}")
    report = {"constants": constants}
    if not args.no_cv:
        cv = cross_validated(rows)
        report["cross_validation"] = cv
        print(f"leave-one-workload-out: residual sd of log r {cv['residual_sd']:.3f}")
        for thr, bins in cv["bins"].items():
            print(f"  {thr.split()[0]}: P(r >= {thr.split()[1]}):")
            for b in bins:
                print(f"    planned [{b['lo']:.2f}, {b['hi']:.2f}): {b['n']:4d} rows, mean P "
                      f"{b['mean_p']:.3f}, cleared {b['cleared']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.write:
        print(f"wrote {write(constants, args.catalogs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
