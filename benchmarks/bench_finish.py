"""Mixing-only rounds at the end of a sparse plan, against the fully connected plan.

Where collaboration matters (mnist1d with the MLP at N = 80), sparse plans level off below the
target when the target is judged on the clients' own models (`accuracy`, the mean accuracy of
the models the devices hold), although their network-average model is nearly as good as the
fully connected plan's: the clients' models stay apart (the consensus distance). This measures
what a few mixing-only rounds (``Trainer.step(train=False)``: the rule mixes, nobody trains)
after T training rounds buy:

- per (alpha, seed): the fully connected, uncompressed D-SGD plan over the air (``complete``,
  k = 1, the reference ``fc`` is defined on) trained for the whole budget; ``fc`` = its clients' final mean accuracy averaged over the
  seeds, the target ``ratio x fc``, and its channel uses to the target (the SLA's smoothed
  rule, :func:`airplan_qo.evaluation.metrics.outcome_from_curve`);
- per sparse plan and seed: T training rounds (each T of ``--at``), then up to ``--finish``
  mixing-only rounds (and, with ``--finish-on TOPOLOGY``, ``--finish-on-rounds`` mixing-only
  rounds on that topology instead, the trainer rewired to it; with ``--finish-train`` those
  rounds train there too, the budget's last rounds spent on that topology); the round at which the
  clients' mean accuracy reaches the target on the same smoothed rule over the whole curve
  (training then mixing), and its channel uses against the fully connected plan's on the same
  seed.

Each plan is planned as the planner would (its weights rule, the workload's channel) with the
topology, k = 1 and over-the-air transport fixed. Prints one JSON line per (plan, seed, T) and a
summary table.

    OMP_NUM_THREADS=1 nice python benchmarks/bench_finish.py
    OMP_NUM_THREADS=1 nice python benchmarks/bench_finish.py --alphas 0.3 1 --seeds 0 1
    OMP_NUM_THREADS=1 nice python benchmarks/bench_finish.py --clients 100 --at 173 196 \
        --finish 27 --finish-on complete --finish-on-rounds 4
    OMP_NUM_THREADS=1 nice python benchmarks/bench_finish.py --dataset leaf_synthetic \
        --clients 40 --param partition=natural --rounds 100 --at 50 100 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

import airplan_qo as aq
from airplan_qo.evaluation.metrics import outcome_from_curve
from airplan_qo.plans.workload import Workload
from airplan_qo.runtime import Trainer
from airplan_qo.runtime.execution import prepare, trainer_inputs

PLANS = ("one_peer_exponential", "small_world(k=4)", "d_cliques")


def _trainer(db, w: Workload, topology: str, algorithms: list[str] | None = None
             ) -> tuple[Trainer, str]:
    # the SLA only has to admit the fixed plan: this measures it, whatever its prediction
    result = db.plan(w, sla="accuracy >= 0.1 * fc", topologies=[topology], sparsity=[1.0],
                     transports=["ota"], algorithms=algorithms, fallback="error")
    job, _, _ = prepare(db.catalog, result, stop_at_target=False)
    return Trainer(job.config, *trainer_inputs(job.workload, job.spec)), \
        result.chosen.plan.label()


def _curve(rows: list[dict]) -> tuple[list, list]:
    return [r["client_acc_mean"] for r in rows], [r["channel_uses"] for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="mnist1d")
    ap.add_argument("--clients", type=int, default=80)
    ap.add_argument("--alphas", type=float, nargs="+", default=[1.0])
    ap.add_argument("--snr-db", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--plans", nargs="+", default=list(PLANS))
    ap.add_argument("--at", type=int, nargs="+", default=[100, 150, 200],
                    help="training rounds after which the mixing-only rounds start")
    ap.add_argument("--finish", type=int, default=40, help="mixing-only rounds at most")
    ap.add_argument("--finish-on", metavar="TOPOLOGY",
                    help="also mix on this topology instead (rewired after the T training "
                         "rounds; built as the planner builds it for the workload), for "
                         "--finish-on-rounds rounds")
    ap.add_argument("--finish-on-rounds", type=int, default=4)
    ap.add_argument("--finish-train", action="store_true",
                    help="the --finish-on rounds train as well (a plan that moves to that "
                         "topology for its last rounds), instead of only mixing")
    ap.add_argument("--ratio", type=float, default=0.95, help="target = ratio x fc")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="another workload parameter (e.g. partition=natural)")
    args = ap.parse_args()
    if not all(1 <= t <= args.rounds for t in args.at):
        ap.error(f"every --at must be in 1..--rounds ({args.rounds}), got {args.at}")
    with tempfile.TemporaryDirectory(prefix="bench_finish_") as tmp:
        return measure(args, Path(tmp))


def measure(args: argparse.Namespace, tmp: Path) -> int:
    """Train, branch and print (the checkpoints at each T go to ``tmp``)."""
    torch.set_num_threads(1)
    print(f"# {platform.node()} torch {torch.__version__}, one thread; {args.dataset} "
          f"N={args.clients}, {args.snr_db} dB, {args.rounds} rounds, target {args.ratio} x fc")
    db = aq.connect(":memory:")
    summary = []
    for alpha in args.alphas:
        runs, fc_runs = {}, {}
        for seed in args.seeds:
            w = Workload.from_params(args.dataset, args.clients, {
                "alpha": alpha, "snr_db": args.snr_db, "rounds": args.rounds, "seed": seed,
                **dict(p.split("=", 1) for p in args.param)})
            db.analyze(w)           # D-Cliques forms its cliques from the label statistics
            t0 = time.perf_counter()
            fc, fc_label = _trainer(db, w, "complete", ["dsgd"])     # the reference: D-SGD
            fc_runs[seed] = [fc.step() for _ in range(args.rounds)]
            fc_time = time.perf_counter() - t0
            # the topology the tails rewire to, built once per seed
            other = _trainer(db, w, args.finish_on)[0].topology if args.finish_on else None
            for topology in args.plans:
                trainer, label = _trainer(db, w, topology)
                rows, saved = [], {}
                for r in range(1, args.rounds + 1):
                    rows.append(trainer.step())
                    if r in args.at:
                        saved[r] = tmp / f"{alpha}-{seed}-{len(runs)}-{r}.pt"
                        trainer.save(saved[r])
                finishes = {}
                for t, path in saved.items():
                    again, _ = _trainer(db, w, topology)
                    again.load(path)
                    finishes[t] = [again.step(train=False) for _ in range(args.finish)]
                    if other is not None:
                        again, _ = _trainer(db, w, topology)
                        again.load(path)
                        again.rewire(other)
                        finishes[(t, args.finish_on)] = [
                            again.step(train=args.finish_train)
                            for _ in range(args.finish_on_rounds)]
                runs[(topology, seed)] = (label, rows, finishes)
            print(f"# alpha {alpha} seed {seed}: {time.perf_counter() - t0:.0f} s "
                  f"(fc {fc_time:.0f} s)", flush=True)
        fc_acc = statistics.mean(rows[-1]["client_acc_mean"] for rows in fc_runs.values())
        target = args.ratio * fc_acc
        fc_cost = {}
        for seed, rows in fc_runs.items():
            reached, rounds, cost = outcome_from_curve(*_curve(rows), 0.0, target)
            fc_cost[seed] = cost if reached else None
            print(json.dumps({"alpha": alpha, "seed": seed, "plan": fc_label, "fc": fc_acc,
                              "target": target, "reached": reached, "rounds": rounds,
                              "channel_uses": cost}))
        for (topology, seed), (label, rows, finishes) in runs.items():
            for key, extra in finishes.items():
                t, on = key if isinstance(key, tuple) else (key, None)
                acc, cost = _curve(rows[:t] + extra)
                reached, rounds, spent = outcome_from_curve(acc, cost, 0.0, target)
                line = {"alpha": alpha, "seed": seed,
                        "plan": label + (f", {'training' if args.finish_train else 'mixing'} "
                                         f"on {on}" if on else ""), "train_rounds": t,
                        "avg_model_at_t": rows[t - 1]["test_accuracy"],
                        "clients_at_t": rows[t - 1]["client_acc_mean"],
                        "clients_after_finish": extra[-1]["client_acc_mean"],
                        # the clients' accuracy deficit to their average model after each
                        # mixing-only round (docs/results.md, Mixing-only tails)
                        "deficit": [round(x["test_accuracy"] - x["client_acc_mean"], 4)
                                    for x in extra],
                        "reached": reached,
                        "mixing_rounds": max(0, rounds - t) if reached else None,
                        "channel_uses": spent,
                        "vs_fc": (spent / fc_cost[seed]) if reached and fc_cost[seed] else None}
                print(json.dumps(line))
                summary.append(line)
        no_finish = {(tp, s): outcome_from_curve(*_curve(rows), 0.0, target)[0]
                     for (tp, s), (_, rows, _) in runs.items()}
        print(f"# alpha {alpha}: fc {fc_acc:.4f}, target {target:.4f}; without mixing-only "
              f"rounds {sum(no_finish.values())} of {len(no_finish)} sparse runs reach it")
    print("\n| alpha | plan | T | avg model at T | clients at T | mixing rounds to target "
          "| clients after all | channel uses / fc's |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summary:
        ratio = f"{s['vs_fc']:.3f}" if s["vs_fc"] is not None else "not reached"
        plan, _, on = s["plan"].replace(", training on ", ", mixing on ").partition(", mixing on ")
        plan = plan[:40] + (f", then on {on}" if on else "")
        print(f"| {s['alpha']} | {plan} (seed {s['seed']}) | {s['train_rounds']} | "
              f"{s['avg_model_at_t']:.3f} | {s['clients_at_t']:.3f} | "
              f"{s['mixing_rounds'] if s['mixing_rounds'] is not None else '-'} | "
              f"{s['clients_after_finish']:.3f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
