"""Picks with a pilot of the fully connected reference against picks without, judged on
measured runs.

Per seed: the fully connected plan trains the whole round budget (the truth: its final accuracy
is the SLA's ``fc``, the target ``0.95 fc``, and its own cost to reach the target is the
always-fully-connected baseline). The planner then picks without a pilot (``ttt`` with the
shipped fit; the dataset may be one it has never seen) and with ``pilot = 'fc'`` for
``--pilot-rounds`` rounds. Each pick trains the whole budget on the same seed, and is judged on
its measured curve against the true target: reached or not, the round it reached it (smoothed
crossing, as the SLA is judged), and its channel uses up to that round (plus the pilot's, for
the pick made with it, except where the pick is the pilot's own plan, which goes on from the
pilot's last round: its rounds are then paid once); and as a TRAIN of it would run: stopping one round after its *planned*
target (0.95 of the fc it was planned with) or at the budget, whether the clients' accuracy
there meets the true target, and its channel uses to there. Costs are divided by the fully
connected plan's own (run the same two ways). Prints one JSON line per seed and pick, then a
summary.

    OMP_NUM_THREADS=1 nice python benchmarks/bench_pilot.py --seeds 0 1

The pilot and the judged runs share the workload's seed (the pilot trains on the same clients'
data, as a real one would), and a pick equal to the fully connected plan reuses the truth run.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import attrs

import airplan_qo as aq
from airplan_qo.plans.sla import TARGET_METRICS, first_crossing


def judged(history, target: float, metric: str = "accuracy") -> dict:
    """Reached, rounds to ``target`` and channel uses to that round on a measured history."""
    key = TARGET_METRICS[metric]
    points = [(h["round"], h[key]) for h in history]
    reached = first_crossing(points, target)
    upto = reached if reached is not None else len(history)
    return {"reached": reached is not None, "rounds": reached,
            "channel_uses": float(sum(h["channel_uses"] for h in history[:upto]))}


def as_run(history, planned: float, true_target: float, metric: str = "accuracy") -> dict:
    """How a TRAIN of the pick would go: it stops one round after its planned target's
    (smoothed) crossing, else at the budget; its channel uses to there, and whether the
    clients' accuracy there meets the true target."""
    key = TARGET_METRICS[metric]
    points = [(h["round"], h[key]) for h in history]
    crossing = first_crossing(points, planned)
    stop = min(crossing + 1, len(history)) if crossing is not None else len(history)
    return {"stop_round": stop, "reached_planned": crossing is not None,
            "accuracy_at_stop": history[stop - 1][key],
            "meets_true_target": history[stop - 1][key] >= true_target,
            "channel_uses": float(sum(h["channel_uses"] for h in history[:stop]))}


def train_whole_budget(db, result):
    return db.execute(result, stop_at_target=False, reoptimize=False).result.history


def measure(db, w, pilot_rounds: int) -> list[dict]:
    from airplan_qo.runtime.pilot import run_reference_pilot

    t0 = time.perf_counter()
    truth = run_reference_pilot(db, w, rounds=w.rounds, statement="truth: fc whole budget")
    fc_true = truth.accuracy[-1]
    target = 0.95 * fc_true
    truth_history = db.catalog.query(
        "SELECT round, test_accuracy, client_acc_mean, channel_uses FROM airplan.round_stats "
        "WHERE exec_id = ? ORDER BY round", [truth.exec_id])
    fc_label = "complete [metropolis_hastings] k=1"
    curves = {fc_label: truth_history}
    fc_cost = judged(truth_history, target)
    rows = []
    for how, kwargs in (("without pilot", {}),
                        ("with pilot", {"pilot": "fc", "pilot_rounds": pilot_rounds})):
        start = time.perf_counter()
        result = db.plan(w, **kwargs)
        plan_s = time.perf_counter() - start
        label = result.chosen.plan.label()
        if label not in curves:
            curves[label] = train_whole_budget(db, result)
        outcome = judged(curves[label], target)
        pilot = result.request.pilot
        pilot_uses = pilot.channel_uses if pilot is not None else 0.0
        run = as_run(curves[label], result.target_accuracy, target)
        if result.chosen.cost.continues_pilot:
            # the pick is the pilot's plan and goes on from the pilot's last round: its rounds
            # up to there are the pilot's, paid once (the same run bit for bit)
            paid = max(outcome["channel_uses"], pilot_uses)
            run_paid = max(run["channel_uses"], pilot_uses)
        else:
            paid = outcome["channel_uses"] + pilot_uses
            run_paid = run["channel_uses"] + pilot_uses
        fc_run = as_run(truth_history, target, target)
        est = result.chosen.cost.estimate
        rows.append({
            "dataset": w.dataset, "clients": w.clients, "alpha": w.alpha, "model": w.model,
            "seed": w.seed, "pick": how, "plan": label, "fallback": result.fallback,
            "p_meets_sla": est.p_meets, "fc_planned": result.fc_accuracy,
            "fc_measured": fc_true, "target_planned": result.target_accuracy,
            "target_true": target, "reached": outcome["reached"], "rounds": outcome["rounds"],
            "channel_uses": paid,
            "pilot_channel_uses": pilot.channel_uses if pilot is not None else 0.0,
            "fc_channel_uses": fc_cost["channel_uses"], "fc_rounds": fc_cost["rounds"],
            "cost_over_fc": paid / fc_cost["channel_uses"] if fc_cost["reached"] else None,
            "run_stop_round": run["stop_round"], "run_reached_planned": run["reached_planned"],
            "run_accuracy_at_stop": run["accuracy_at_stop"],
            "run_meets_true_target": run["meets_true_target"],
            "continues_pilot": bool(result.chosen.cost.continues_pilot),
            "run_channel_uses": run_paid,
            "run_cost_over_fc": run_paid / fc_run["channel_uses"],
            "planning_s": round(plan_s, 2)})
    rows[-1]["seed_wall_s"] = round(time.perf_counter() - t0, 1)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mnist1d")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--pilot-rounds", type=int, default=50)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        with aq.connect(Path(tmp) / "bench.duckdb") as db:
            base = aq.Workload(dataset=args.dataset, clients=args.clients, alpha=args.alpha,
                               model=args.model, rounds=args.rounds)
            for seed in args.seeds:
                for row in measure(db, attrs.evolve(base, seed=seed), args.pilot_rounds):
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(f"# {platform.processor() or platform.machine()}, {args.dataset} N={args.clients} "
          f"alpha={args.alpha} {args.model}, {args.rounds} rounds, pilot {args.pilot_rounds}")
    for how in ("without pilot", "with pilot"):
        mine = [r for r in rows if r["pick"] == how]
        ratios = [r["cost_over_fc"] for r in mine if r["cost_over_fc"] is not None]
        print(f"# {how}: picks {', '.join(r['plan'] for r in mine)}; P(meets SLA) "
              + ", ".join(f"{r['p_meets_sla']:.3f}" for r in mine)
              + "; fc planned / measured "
              + ", ".join(f"{r['fc_planned']:.3f}/{r['fc_measured']:.3f}" for r in mine)
              + f"; whole-budget curve reached the true target in "
              f"{sum(r['reached'] for r in mine)}/{len(mine)}, cost / fully connected's "
              + ", ".join(f"{x:.2f}" for x in ratios)
              + "; as a TRAIN would run (stop after the planned target): stopped at round "
              + ", ".join(str(r["run_stop_round"]) for r in mine)
              + f", met the true target {sum(r['run_meets_true_target'] for r in mine)}/"
              f"{len(mine)}, cost / fully connected's "
              + ", ".join(f"{r['run_cost_over_fc']:.2f}" for r in mine))


if __name__ == "__main__":
    main()
