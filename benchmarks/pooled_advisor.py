"""The shipped advisor judged over several evaluation grids at once, beside every fixed policy.

Each grid is re-analysed from its catalog (``airplan evaluate``; a run missing from the catalog
trains first), and its tasks (a workload judged at one SLA) are pooled. For the advisor as
planned (the estimator's priors: the planner a user runs), always the fully connected reference
and every fixed single-plan policy (``evaluation/metrics.py``: ``policy_of``; a plan with its own
mixing-only tail is one policy whatever the tail's length), over all pooled tasks and per
dataset:

- the share of tasks whose SLA the pick met (a strict majority of its seeds reached the target);
- the share of its seed runs that reached the target;
- its median and geometric-mean cost ratio to the **confident oracle**, the cheapest measured
  plan that reached the target in every seed (tasks without one are left out of the ratios);

and the same per grid when there are several. With ``--without-tails`` each grid is also planned
without mixing-only tails (``mix_rounds`` 0, the planner's default), and those picks are judged
on the same tasks (tails among the plans the confident oracle is chosen from): what the tails
buy.

The best fixed policy is chosen in hindsight over the pooled tasks (``best_policy``: among
those scored on at least half as many tasks as the widest, the one meeting the SLA most often,
then the cheapest by geometric-mean ratio to the oracle); per dataset, over that dataset's
tasks. Usage::

    python benchmarks/pooled_advisor.py hungry_onestep_mixed=mixed.duckdb \\
        hungry_tails_holdout=htails2.duckdb [--datasets mnist1d,leaf_synthetic] [--json out.json]
        [--without-tails] [--level-holdout CATALOG,CATALOG] [--calibration]

``--calibration`` also sets every plan's planned P(meets the SLA), as the advisor planned it,
beside the share of its seed runs that reached the target (by bins of P and by fixed policy),
and prints the planned P of each task's confident oracle: whether the oracle's plans were ones the planner could have bought at
its confidence.

``--level-holdout`` judges the tails' level model (costmodels/tail_level.py) out of sample: each
grid is planned with the model refitted on the listed catalogs' runs less that grid's own
workloads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import attrs
import numpy as np

import airplan_qo as aq
from airplan_qo.costmodels.tail_level import fit_level
from airplan_qo.errors import AirPlanError
from airplan_qo.evaluation.grid import load_grid
from airplan_qo.evaluation.harness import run_evaluation
from airplan_qo.evaluation.metrics import best_policy, confident_oracle, policy_of, \
    policy_plans, policy_table, seed_run_figures
from airplan_qo.evaluation.tail_level_fit import grid_workload_keys, level_fit_in_use, level_rows


def without_tails(grid):
    """The grid planned without mixing-only tails (every workload's ``mix_rounds`` 0)."""
    return attrs.evolve(grid, workloads=tuple(attrs.evolve(w, mix_rounds=0)
                                              for w in grid.workloads))


def tasks_of(pairs: list[tuple[str, str]], datasets: set[str] | None,
             tails: bool = True, confidence: float | None = None,
             level_data: list[dict] | None = None) -> list[dict]:
    """Every task of the grids, re-analysed from their catalogs: its dataset, its plans'
    summaries, its oracle, the advisor's pick and the fully connected reference's label
    (``tails=False``: each grid planned without mixing-only tails; ``confidence``: planned at
    that confidence instead of the grid's; ``level_data``: each grid planned with the tails'
    level model refitted on these rows less the grid's own workloads)."""
    out = []
    for grid_name, catalog in pairs:
        grid = load_grid(grid_name)
        held_out = contextlib.nullcontext()
        if level_data is not None:
            own = grid_workload_keys(grid)
            held_out = level_fit_in_use(fit_level([r for r in level_data
                                                   if r["workload"] not in own]))
        if confidence is not None:
            grid = grid.with_confidence(confidence)
        if not tails:
            grid = without_tails(grid)
        with tempfile.TemporaryDirectory() as tmp, aq.connect(catalog) as db, held_out:
            report = run_evaluation(db, grid, out_dir=tmp, figures=False, scalability=False)
        analysis = report.analysis
        for w in analysis.workloads:
            dataset = w.spec.workload.dataset
            if datasets and dataset not in datasets:
                continue
            out.append({"key": f"{grid.name}: {w.key}", "grid": grid.name, "dataset": dataset,
                        "summaries": {p: s for p, s in w.summaries.items() if p in w.candidates},
                        "oracle": w.oracle, "advisor": w.before.advisor_plan,
                        "planned_p": dict(w.pick_before.planned_p),
                        "fc": fully_connected(w.summaries)})
        print(f"{grid.name}: {len(analysis.workloads)} tasks from {catalog}", file=sys.stderr)
    return out


def fully_connected(summaries) -> str | None:
    """The label of the fully connected reference among a task's plans (complete graph, k = 1,
    no tail), None when it is not there."""
    return next((p for p, s in summaries.items() if s.family == "complete"
                 and "mix=" not in p and p.endswith(" k=1")), None)


def judge(tasks: list[dict], plain: dict[str, str] | None = None) -> dict:
    """The advisor, always fully connected and the best fixed policy over ``tasks``; with
    ``plain`` (task -> the pick planned without tails), also those picks."""
    summaries = {t["key"]: t["summaries"] for t in tasks}
    policies = policy_table({t["key"]: (t["summaries"], t["oracle"]) for t in tasks})
    best = best_policy(policies)

    def figures(picks: dict[str, str]) -> dict:
        met = [summaries[k][p].meets_sla for k, p in picks.items() if p in summaries[k]]
        return {"tasks": len(met), "sla_met_rate": sum(met) / len(met) if met else None,
                **seed_run_figures(picks, summaries)}

    out = {"tasks": len(tasks),
           "advisor (priors)": figures({t["key"]: t["advisor"] for t in tasks}),
           "always fully connected": figures({t["key"]: t["fc"] for t in tasks if t["fc"]})}
    if plain is not None:
        out["advisor (priors) without tails"] = figures(
            {t["key"]: plain[t["key"]] for t in tasks if t["key"] in plain})
    if best is not None:
        follow = {t["key"]: plans[0] for t in tasks
                  if (plans := policy_plans(best["policy"], t["summaries"]))}
        out[f"best fixed: {best['policy']}"] = figures(follow)
    return out


#: Bins of the planned P(meets the SLA) in :func:`calibration`.
P_BINS = (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)


def calibration(tasks: list[dict]) -> dict:
    """Every plan of every task by its planned P(meets the SLA) (at the advisor's target, as
    the advisor planned it): per bin, the plans, their seed runs and the share of those that
    reached the target, and the share of the plans that reached it in every seed; and the
    planned P of each task's confident oracle (the cheapest plan that reached the target in
    every seed); and per fixed policy (:func:`policy_of`), its plans' mean planned P against the
    share of their seed runs that reached the target."""
    planned = [(p, label, s) for t in tasks for label, s in t["summaries"].items()
               if s.n_seeds and (p := t["planned_p"].get(label)) is not None]
    bins = []
    for lo, hi in zip(P_BINS, P_BINS[1:]):
        last = hi == P_BINS[-1]
        sel = [s for p, _, s in planned if lo <= p and (p <= hi if last else p < hi)]
        if not sel:
            continue
        runs = sum(s.n_seeds for s in sel)
        bins.append({"lo": lo, "hi": hi, "plans": len(sel), "seed_runs": runs,
                     "reached": sum(s.n_reached for s in sel) / runs,
                     "every_seed": sum(s.n_reached == s.n_seeds for s in sel) / len(sel)})
    by_policy = defaultdict(list)
    for p, label, s in planned:
        by_policy[policy_of(label)].append((p, s))
    policies = [{"policy": name, "plans": len(rows),
                 "mean_planned_p": float(np.mean([p for p, _ in rows])),
                 "reached": sum(s.n_reached for _, s in rows) / sum(s.n_seeds for _, s in rows)}
                for name, rows in sorted(by_policy.items())]
    oracle_p = [p for t in tasks if (label := confident_oracle(t["summaries"])) is not None
                and (p := t["planned_p"].get(label)) is not None]
    return {"bins": bins, "policies": policies, "confident_oracle_planned_p": sorted(oracle_p)}


def print_calibration(name: str, block: dict) -> None:
    print(f"\n## Planned P against the seed runs: {name}\n")
    print("| planned P | plans | seed runs | reached the target | plans reaching it in every "
          "seed |")
    print("|---|---|---|---|---|")
    for b in block["bins"]:
        print(f"| {b['lo']:.2f}-{b['hi']:.2f} | {b['plans']} | {b['seed_runs']} | "
              f"{_fmt(b['reached'], True)} | {_fmt(b['every_seed'], True)} |")
    print("\n| policy (plans of every task) | plans | mean planned P | seed runs reaching the "
          "target |")
    print("|---|---|---|---|")
    for row in block["policies"]:
        print(f"| {row['policy']} | {row['plans']} | {row['mean_planned_p']:.2f} | "
              f"{_fmt(row['reached'], True)} |")
    ps = block["confident_oracle_planned_p"]
    if ps:
        print(f"\nThe confident oracle's planned P over {len(ps)} tasks: median "
              f"{float(np.median(ps)):.2f}, at least 0.95 on {sum(p >= 0.95 for p in ps)}, "
              f"below 0.9 on {sum(p < 0.9 for p in ps)}.")


def _fmt(v, pct=False):
    if v is None:
        return "n/a"
    return f"{100 * v:.1f}%" if pct else f"{v:.2f}"


def print_table(name: str, block: dict) -> None:
    print(f"\n## {name} ({block['tasks']} tasks)\n")
    print("| policy | tasks | SLA met | seed runs reaching the target | median / gmean ratio to "
          "the confident oracle |")
    print("|---|---|---|---|---|")
    for who, f in block.items():
        if who == "tasks":
            continue
        print(f"| {who} | {f['tasks']} | {_fmt(f['sla_met_rate'], True)} | "
              f"{_fmt(f['seed_runs_reached'], True)} | "
              f"{_fmt(f['median_ratio_to_confident_oracle'])} / "
              f"{_fmt(f['gmean_ratio_to_confident_oracle'])} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pairs", nargs="+", metavar="GRID=CATALOG")
    ap.add_argument("--datasets", default=None,
                    help="comma-separated datasets to keep (default: every task)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--confidence", type=float, default=None,
                    help="plan at this confidence instead of each grid's (the planner's 0.95)")
    ap.add_argument("--without-tails", action="store_true",
                    help="also plan each grid without mixing-only tails and judge those picks")
    ap.add_argument("--calibration", action="store_true",
                    help="also print every plan's planned P(meets the SLA) against the share "
                         "of its seed runs that reached the target, per dataset")
    ap.add_argument("--level-holdout", default=None, metavar="CATALOG[,CATALOG...]",
                    help="plan each grid with the tails' level model refitted on the runs of "
                         "these catalogs less the grid's own workloads (leave one grid out)")
    args = ap.parse_args(argv)
    pairs = []
    for item in args.pairs:
        grid, sep, catalog = item.partition("=")
        if not sep or not grid or not catalog:
            ap.error(f"expected GRID=CATALOG, got {item!r}")
        # a mistyped path would create an empty catalog and train the whole grid into it
        if not Path(catalog).is_file():
            ap.error(f"catalog {catalog!r} does not exist (evaluate the grid into it first: "
                     f"airplan evaluate --grid {grid} --catalog {catalog})")
        pairs.append((grid, catalog))
    datasets = set(args.datasets.split(",")) if args.datasets else None
    try:
        rows = level_rows(args.level_holdout.split(",")) if args.level_holdout else None
        tasks = tasks_of(pairs, datasets, confidence=args.confidence, level_data=rows)
        plain = ({t["key"]: t["advisor"]
                  for t in tasks_of(pairs, datasets, tails=False, confidence=args.confidence)}
                 if args.without_tails else None)
    except (AirPlanError, FileNotFoundError) as exc:
        ap.error(str(exc))
    result = {"all": judge(tasks, plain)}
    by = defaultdict(list)
    for t in tasks:
        by[t["dataset"]].append(t)
    for name in sorted(by):
        result[name] = judge(by[name], plain)
    grids = defaultdict(list)
    for t in tasks:
        grids[t["grid"]].append(t)
    if len(grids) > 1:
        for name, mine in grids.items():
            result[f"grid {name}"] = judge(mine, plain)
    for name, block in result.items():
        print_table(name, block)
    if args.calibration:
        result["calibration"] = {"all": calibration(tasks),
                                 **{name: calibration(mine) for name, mine in sorted(by.items())}}
        for name, block in result["calibration"].items():
            print_calibration(name, block)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
