"""Where over the air wins and where digital wins, from the planner's cost model.

For each (N, degree, SNR, bits per coordinate) it costs one D-SGD round (k = 1) of the same
topology over the air and as digital packets (`airplan_qo.plans.plan.round_cost`), and, with
``--rounds``, plans both with the ``ttt`` estimator on the digits workload so that the totals
include the rounds each needs (digital has no channel noise; its estimate is an extrapolation,
flagged by the planner). It prints Markdown tables of digital / over-the-air ratios (< 1: digital
is cheaper) and the cross-over: the smallest SNR at which digital costs less energy.

    python benchmarks/bench_transport_crossover.py                 # per-round map (seconds)
    python benchmarks/bench_transport_crossover.py --rounds        # totals with ttt rounds
    python benchmarks/bench_transport_crossover.py --measured DIR/summary.json

``--measured`` reads an evaluation of a grid that names transports (``airplan evaluate --grid
baselines``: every run trained on the runtime) and prints the measured map instead: for each
workload (N, SNR), topology (degree) and digital width, D-SGD's channel uses and energy to the
target over the air against digital, who wins (the plan that reaches the target in a majority of
the seeds at the lower cost), and the planner's per-round and rounds ratios beside the measured
ones (where the runtime disagrees with the cost model).

Degrees: 2 is the ring, N - 1 the complete graph, others ``k_regular(d=...)``. The model
dimension cancels (both costs are linear in d), so the per-round map holds for any model.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from airplan_qo.plans.plan import ChannelConfig, PhysicalPlan, round_cost
from airplan_qo.plans.topology import TopologySpec, describe

D = 4810            # the digits MLP (cancels in the per-round ratios)


def spec(n: int, degree: int) -> TopologySpec:
    if degree >= n - 1:
        return TopologySpec.create("complete", n)
    if degree == 2:
        return TopologySpec.create("ring", n)
    return TopologySpec.create("k_regular", n, d=degree)


def per_round(n: int, degree: int, snr_db: float, bits: int, g_th: float = 0.1):
    stats = describe(spec(n, degree))[1]
    ch = ChannelConfig(snr_db=snr_db, g_th=g_th)
    ota = round_cost(PhysicalPlan(stats.spec, 1.0, ch), stats, D)
    dig = round_cost(PhysicalPlan(stats.spec, 1.0, ch, transport="digital", bits=bits), stats, D)
    return (dig.channel_uses / ota.channel_uses, dig.energy_j / ota.energy_j, dig.rate)


def totals(db, n: int, degree: int, snr_db: float, bits: int):
    import airplan_qo as aq

    s = spec(n, degree)
    topo = s.family if not s.params else f"{s.family}(d={degree})"
    w = aq.Workload(dataset="digits", clients=n, alpha=0.5, snr_db=snr_db)
    r = db.plan(w, topologies=[topo], sparsity=[1.0], weights=["metropolis_hastings"],
                transports=["ota", f"digital(bits={bits})"], fallback="complete")
    by = {c.plan.transport: c for c in r.candidates if c.plan.topology.family == s.family}
    o, d = by["ota"], by["digital"]
    if not (o.cost.rounds and d.cost.rounds):
        return None
    return (d.cost.total("channel_uses") / o.cost.total("channel_uses"),
            d.cost.total("energy_j") / o.cost.total("energy_j"), d.cost.rounds / o.cost.rounds)


DEGREE = {"ring": "2", "small_world": "4", "complete": "N-1"}


def _winner(o: dict, d: dict, key: str) -> str:
    """Who wins on ``key`` (channel uses or energy to the target): a plan that reaches the
    target in a majority of its seeds beats one that does not; else the lower mean."""
    ok_o, ok_d = 2 * o["reached"] > o["seeds"], 2 * d["reached"] > d["seeds"]
    if not (ok_o or ok_d):
        return "neither reaches"
    if ok_o != ok_d:
        return "ota" if ok_o else "digital"
    return "ota" if o[key]["mean"] <= d[key]["mean"] else "digital"


def measured_map(path: str) -> None:
    """The measured over-the-air vs digital map from an evaluation's summary.json."""
    import json

    block = json.loads(Path(path).read_text()).get("baselines")
    if not block:
        raise SystemExit(f"{path}: no baselines block (the grid names no transports)")
    rows = []
    for key, plans in block["per_workload"].items():
        w = block["workloads"][key]
        dsgd = [p for p in plans if p["algorithm"] == "dsgd"]
        ota = {p["family"]: p for p in dsgd if p["transport"] == "ota"}
        for d in dsgd:
            o = ota.get(d["family"])
            if d["transport"] != "digital" or o is None:
                continue
            rows.append((w["clients"], w["snr_db"], d["family"], d["bits"], o, d))
    rows = sorted(set((r[0], r[1], r[2], r[3]) for r in rows)), {
        (r[0], r[1], r[2], r[3]): r[4:] for r in rows}
    print("Measured on the runtime (mean over seeds): D-SGD digital / over the air. uses, energy:"
          " to the target (a seed that never reaches it counts its whole run, a lower bound); "
          "reached: seeds that reach it, ota | digital; winner: channel uses | energy. "
          "Planned / measured: the digital / ota ratio of channel uses per round and of rounds "
          "as the planner costs and predicts them, and as measured.\n")
    print("| N | SNR dB | degree | b | uses d/o | energy d/o | reached o / d | winner uses | "
          "winner energy | per-round uses d/o planned / measured | rounds d/o planned / "
          "measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    order, by = rows
    for n, snr, family, bits in order:
        o, d = by[(n, snr, family, bits)]
        if d["channel_uses"] is None or o["channel_uses"] is None:
            continue
        cu = d["channel_uses"]["mean"] / o["channel_uses"]["mean"]
        en = d["energy_j"]["mean"] / o["energy_j"]["mean"]
        pp = d["planned_per_round"]["channel_uses"] / o["planned_per_round"]["channel_uses"]
        mp = (d["measured_per_round"]["channel_uses"] / o["measured_per_round"]["channel_uses"]
              if o["measured_per_round"]["channel_uses"] else float("nan"))
        pr = ("never" if not (d["planned_rounds"] and o["planned_rounds"])
              else f"{d['planned_rounds'] / o['planned_rounds']:.2f}")
        mr = d["rounds"]["mean"] / o["rounds"]["mean"]
        print(f"| {n} | {snr:g} | {DEGREE.get(family, family)} | {bits} | {cu:.3g} | {en:.3g} | "
              f"{o['reached']}/{o['seeds']} / {d['reached']}/{d['seeds']} | "
              f"{_winner(o, d, 'channel_uses')} | {_winner(o, d, 'energy_j')} | "
              f"{pp:.3g} / {mp:.3g} | {pr} / {mr:.2f} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 20, 50])
    ap.add_argument("--degrees", type=int, nargs="+", default=[2, 4, 8, 0],
                    help="0 = complete graph")
    ap.add_argument("--snr", type=float, nargs="+", default=[0.0, 10.0, 20.0, 30.0])
    ap.add_argument("--bits", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--rounds", action="store_true",
                    help="totals with the ttt estimator's rounds (digits workload)")
    ap.add_argument("--measured", metavar="SUMMARY_JSON",
                    help="the measured map from an evaluation's summary.json (airplan evaluate "
                         "--grid baselines) instead of the cost model's")
    args = ap.parse_args(argv)
    if args.measured:
        measured_map(args.measured)
        return
    db = None
    if args.rounds:
        import airplan_qo as aq

        db = aq.connect(Path(tempfile.mkdtemp()) / "crossover.duckdb")
    what = "total" if args.rounds else "per round"
    print(f"digital / over-the-air, {what}: channel uses | energy"
          + (" | rounds" if args.rounds else " | rate R (bit/cu)")
          + "; < 1 means digital is cheaper\n")
    print("| N | degree | b | " + " | ".join(f"{s:g} dB" for s in args.snr)
          + " | digital cheaper in energy from |")
    print("|---|---|---|" + "---|" * len(args.snr) + "---|")
    for n in args.clients:
        for deg in args.degrees:
            degree = n - 1 if deg == 0 or deg >= n - 1 else deg
            for bits in args.bits:
                cells, first = [], None
                for snr in args.snr:
                    got = (totals(db, n, degree, snr, bits) if args.rounds
                           else per_round(n, degree, snr, bits))
                    if got is None:
                        cells.append("never")
                        continue
                    cu, en, third = got
                    cells.append(f"{cu:.3g} / {en:.3g} / {third:.3g}")
                    if en < 1 and first is None:
                        first = snr
                label = "N-1" if degree == n - 1 else str(degree)
                print(f"| {n} | {label} | {bits} | " + " | ".join(cells) + " | "
                      + ("not in range" if first is None else f"{first:g} dB") + " |")
    if db is not None:
        db.close()


if __name__ == "__main__":
    main()
