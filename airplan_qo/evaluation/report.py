"""The Markdown report of an advisor evaluation (what the CLI writes to ``report.md``)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..plans.sla import parse_sla
from .metrics import best_policy

PAPER = {"match": "91.4% (topology)", "mape": "2.9-4.8% (C_ours, per topology)",
         "overhead": "< 1.8% of training cost (N = 100)", "f1": "> 0.87 per topology",
         "regret_acc": "<= 0.3 pp when wrong"}


def _pct(x: float | None, nd: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{nd}f}%"


def _num(x: float | None, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{nd}f}"


def _sig(x: float | None) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.4g}"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def _advisors(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The table of advisors judged on some seeds (noise ceiling, full hindsight)."""
    return _table(["advisor", "within-noise match", "pick meets the SLA", "median cost ratio",
                   "geometric-mean cost ratio"],
                  [[name, _rate(b, "within_noise_rate"), _rate(b, "advisor_meets_sla_rate"),
                    _num(b["median_cost_ratio"]), _num(b["gmean_cost_ratio"])]
                   for name, b in rows.items()])


def _seeds(seeds: list[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def _rate(block: dict[str, Any] | None, key: str) -> str:
    if block is None:
        return "n/a"
    n = block["with_oracle"] if key != "advisor_meets_sla_rate" else block["workloads"]
    v = block[key]
    hits = "" if v is None else f" ({round(v * n)}/{n})"
    return _pct(v) + hits


def in_short(analysis) -> list[str]:
    """Three lines a newcomer can read first: the shipped advisor (the planner's default ``ttt``
    model) against the best fixed single-plan policy (among those measured on at least half as
    many workloads as the widest), on the share of workloads whose SLA the pick met and the
    geometric-mean cost ratio to the cheapest plan that met it."""
    g, s = analysis.grid, analysis.summary
    ttt = s.get("time_to_target") or {}
    if g.estimator == "ttt":
        block, who = s["uncalibrated"], "the planner's default cost model `ttt`, as shipped"
    elif ttt.get("predicted_fc"):
        block, who = ttt["predicted_fc"], ("the planner's default cost model `ttt`, fitted "
                                           "without each held-out workload")
    else:
        block, who = s["uncalibrated"], f"the `{g.estimator}` cost model"
    best = best_policy(s["policies"])
    runs = (s.get("seed_runs") or {}).get("advisor (priors)") if g.estimator == "ttt" else None
    seeds = ("" if runs is None or runs["seed_runs_reached"] is None else
             f"; {_pct(runs['seed_runs_reached'])} of its seed runs reached the target")
    lines = [f"- **Advisor** ({who}): its pick met the SLA on "
             f"{_rate(block, 'advisor_meets_sla_rate')} of the workloads, at "
             f"{_num(block.get('gmean_cost_ratio'))} times the cost of the cheapest plan that "
             f"met it (geometric mean; 1.00 is perfect){seeds}."]
    if best is not None:
        lines.append(f"- **Best fixed policy** (always `{best['policy']}`): met the SLA on "
                     f"{_pct(best['sla_met_rate'])} of its {best['workloads']} workloads, at "
                     f"{_num(best.get('gmean_cost_ratio'))} times that cost.")
        a, b = block.get("gmean_cost_ratio"), best.get("gmean_cost_ratio")
        verdict = ("no verdict: a cost ratio is missing" if a is None or b is None else
                   "the advisor costs as much as always choosing that plan"
                   if abs(a / b - 1) < 0.005 else
                   f"the advisor costs {100 * abs(a / b - 1):.0f}% "
                   f"{'less' if a < b else 'more'} than always choosing that plan")
        lines.append(f"- **So**: {verdict}; the sections below give the detail"
                     + ("" if g.estimator == "ttt" else
                        f" (the Summary table judges the grid's `{g.estimator}` model)") + ".")
    else:
        lines.append("- No fixed single-plan policy could be scored on this grid.")
    return ["## In short", ""] + lines + [""]


def _judged_on(grid) -> str:
    """What the grid's runs are judged on (one grid judges one accuracy metric)."""
    metric = parse_sla(grid.workloads[0].sla).accuracy_metric
    return ("the accuracy of its network-average model (the SLA's avg_model_accuracy)"
            if metric == "avg_model_accuracy" else "its mean client-model accuracy")


def render(analysis, *, figures: list[Path], wall_s: float, command: str,
           evaluation_id: int | None) -> str:
    """The whole report as Markdown text."""
    a, g, s = analysis, analysis.grid, analysis.summary
    before, after = s["uncalibrated"], s["calibrated"]
    lines = [f"# Advisor evaluation: grid `{g.name}`", ""]
    if g.description:
        lines += [g.description, ""]
    lines += [
        f"- grid: `{g.source}` (sha256 `{g.sha[:16]}`), {s['workloads']} workloads, "
        f"{s['candidates_per_workload']['median']:.0f} candidate plans per workload (median), "
        f"seeds {s['seeds']}, {s['folds']} cross-validation folds over workloads",
        f"- estimator `{g.estimator}`, objective `{g.objective}` (the oracle's cost is channel "
        "uses to the target, statistics broadcast included)"
        + (f", chance-constraint confidence {g.confidence:g}" if g.confidence else ""),
        f"- runs: {s['runs']} ({s['trained']} trained now, {s['cached']} reused from the "
        f"catalog); training time of the new runs {s['train_seconds']:.1f} s"
        + (f" ({s['seconds_per_trained_run']:.2f} s per run)"
           if s["seconds_per_trained_run"] else "")
        + f"; whole evaluation {wall_s:.1f} s",
        f"- evaluation id {evaluation_id}; reproduce with `{command}`", ""]

    lines += in_short(analysis)
    ov = s["overhead"]
    lines += ["## Summary", ""]
    lines += _table(
        ["metric", "advisor, priors", "advisor, calibrated (k-fold CV)", "paper"],
        [["plan match rate (topology, weights, k)", _rate(before, "match_rate"),
          _rate(after, "match_rate"), "-"],
         ["topology-family match rate", _rate(before, "family_match_rate"),
          _rate(after, "family_match_rate"), PAPER["match"]],
         ["within-noise match (meets the SLA, paired log-cost excess within noise)",
          _rate(before, "within_noise_rate"), _rate(after, "within_noise_rate"), "-"],
         ["advisor's pick meets the SLA (measured)", _rate(before, "advisor_meets_sla_rate"),
          _rate(after, "advisor_meets_sla_rate"), "-"],
         ["median cost ratio of the pick to the oracle", _num(before["median_cost_ratio"]),
          _num(after["median_cost_ratio"]) if after else "n/a", "-"],
         ["regret, accuracy (pts): mean / max", _regret(before, "regret_acc_pts"),
          _regret(after, "regret_acc_pts"), PAPER["regret_acc"]],
         ["regret, cost (%): mean / median / max", _regret(before, "regret_cost_pct", True),
          _regret(after, "regret_cost_pct", True), "-"],
         ["rounds MAPE, uncensored runs (n; predicted never)", _mape(before), _mape(after),
          PAPER["mape"]],
         ["macro F1 over families", _num(before["macro_f1"]),
          _num(after["macro_f1"]) if after else "n/a", PAPER["f1"]],
         ["statistics broadcast / training cost of the advisor's pick: median / max",
          _ov(ov["broadcast_share_of_advisor_training_pct"]),
          _ov(ov["broadcast_share_of_calibrated_advisor_training_pct"]), PAPER["overhead"]],
         ["label-statistics bytes / one model transmission: median",
          _ov(ov["sketch_over_model_pct"], median_only=True), "same", "-"]])
    if s["no_oracle"]:
        lines += [f"{s['no_oracle']} workload(s) have no candidate that meets the SLA in "
                  "measurement; they are left out of the match rates and regrets.", ""]
    ceil, rank = s["ceiling"], s["ranking_given_measured_fc"]
    lines += ["## Ceiling error and ranking error", "",
              "Two separate errors: the predicted accuracy of the fully connected plan (`fc`, "
              "which sets the target) against the measured one; and the picks made with the "
              "**measured** `fc` in place of the predicted one, which isolates the ranking of "
              "the candidates.", ""]
    lines += _table(
        ["", "advisor, priors", "advisor, calibrated (k-fold CV)"],
        [["fc error (pts): mean abs / bias / max abs", _ceil(ceil["uncalibrated"]),
          _ceil(ceil["calibrated"])],
         ["with measured fc: within-noise match", _rate(rank["uncalibrated"],
                                                        "within_noise_rate"),
          _rate(rank["calibrated"], "within_noise_rate")],
         ["with measured fc: pick meets the SLA", _rate(rank["uncalibrated"],
                                                         "advisor_meets_sla_rate"),
          _rate(rank["calibrated"], "advisor_meets_sla_rate")],
         ["with measured fc: median cost ratio to the oracle",
          _num(rank["uncalibrated"]["median_cost_ratio"]),
          _num(rank["calibrated"]["median_cost_ratio"]) if rank["calibrated"] else "n/a"]])
    ttt = s.get("time_to_target")
    if ttt:
        lines += ["## Time-to-target advisor (cross-validated)", "",
                  "A censored (Tobit) regression of log rounds-to-target relative to the fully "
                  "connected reference, fitted on the other folds' runs, picking the cheapest "
                  f"plan with P(meets the SLA) >= {ttt['confidence']:g} "
                  "(airplan_qo/costmodels/time_to_target.py). The reference's rounds are either "
                  "measured (its own runs, as a pilot would) or predicted.", ""]
        rows = []
        for label, key in (("reference measured", "measured_fc"),
                           ("reference predicted", "predicted_fc"),
                           ("reference predicted, with pilot racing", "raced")):
            b = ttt.get(key)
            if b is None:
                continue
            pq = ttt["prediction"]["predicted_fc" if key == "raced" else key]
            rows.append([label, _rate(b, "within_noise_rate"),
                         _rate(b, "advisor_meets_sla_rate"), _num(b["median_cost_ratio"]),
                         _num(b.get("gmean_cost_ratio")),
                         _num(pq["median_abs_log_error_all"]), _pct(pq["coverage90_all"])])
        lines += _table(["variant", "within-noise match", "pick meets the SLA",
                         "median cost ratio", "geometric-mean cost ratio",
                         "median abs log error of T", "90% coverage"], rows)
        sr = ttt.get("seed_runs") or {}
        if sr:
            lines += ["What a user sees run by run: the share of the pick's seed runs that reach "
                      "the target, and the pick's cost to the cheapest plan that reached the "
                      "target in every seed (the confident oracle; workloads without one are "
                      "left out of the ratios).", ""]
            lines += _table(
                ["advisor", "seed runs that reach the target", "picks reaching it in every seed",
                 "workloads with a confident oracle", "median cost ratio to it",
                 "geometric-mean cost ratio to it"],
                [[name, _pct(f["seed_runs_reached"]),
                  f"{f['picks_reached_every_seed']}/{f['workloads']}",
                  str(f["with_confident_oracle"]), _num(f["median_ratio_to_confident_oracle"]),
                  _num(f["gmean_ratio_to_confident_oracle"])] for name, f in sr.items()])
        tasks = ttt.get("per_task") or []
        if len(tasks) > 1:
            lines += ["Per task (dataset, and model where not the MLP): the advisor beside the "
                      "best fixed single-plan policy on that task's workloads, chosen in hindsight "
                      "(meets the SLA on most of them, then the cheapest), and beside always the "
                      "fully connected reference. Match: within seed noise of the oracle; seed "
                      "runs: the share of the pick's seed runs that reach the target; ratios: cost "
                      "to the oracle / to the cheapest plan that reached the target in every seed "
                      "(median, geometric mean).", ""]
            rows = []
            for t in tasks:
                for name, f in (("advisor", t["advisor"]),
                                (f"best fixed: {t['best_fixed_policy']}", t["best_fixed"]),
                                ("always fully connected", t["fully_connected"])):
                    if f is None:
                        continue
                    rows.append([t["task"], str(t["workloads"]), name,
                                 _pct(f["within_noise_rate"]), _pct(f["meets_sla_rate"]),
                                 _pct(f["seed_runs_reached"]),
                                 f"{_num(f['median_cost_ratio'])} / {_num(f['gmean_cost_ratio'])}",
                                 f"{_num(f['median_ratio_to_confident_oracle'])} / "
                                 f"{_num(f['gmean_ratio_to_confident_oracle'])}"])
            lines += _table(["task", "workloads", "policy", "within-noise match",
                             "meets the SLA", "seed runs that reach the target",
                             "cost ratio to the oracle", "to the confident oracle"], rows)
        pc = ttt.get("pilot_cost_over_oracle") or {}
        if pc.get("median") is not None:
            lines += [f"Pilot racing (replayed on the measured runs: up to 3 cheaper contenders "
                      f"piloted for a quarter of the budget) raced {pc['raced']} workloads; pilot "
                      f"channel uses / the oracle's cost: median {pc['median']:.3f}, max "
                      f"{pc['max']:.3f}; median cost ratio with the pilot counted: "
                      f"{_num(pc['median_cost_ratio_with_pilot'])}.", ""]
        lines += [f"Predicted fc (the fully connected plan's final accuracy) against the measured "
                  f"one, held out: {_ceil(ttt['ceiling'])} points (mean abs / bias / max abs).",
                  ""]
        nc = ttt.get("noise_ceiling")
        if nc:
            lines += [f"**Noise ceiling.** Every advisor below is judged on seeds "
                      f"{_seeds(nc['judged_seeds'])} only (oracle included); the hindsight "
                      f"advisors have measured every candidate on seeds "
                      f"{_seeds(nc['seen_seeds'])}. What no advisor predicting from statistics "
                      "can be expected to beat:", ""]
            lines += _advisors(nc["advisors"])
            fh = nc.get("full_hindsight")
            if fh:
                lines += [f"**Full hindsight.** Advisors that have measured every candidate on "
                          f"every seed ({_seeds(fh['seeds'])}, the oracle's own), picking the "
                          "cheapest plan that reached the target in at least that many seeds, "
                          "judged on the same seeds (the oracle is the majority rule). The "
                          "all-seeds row is the most an advisor that picks only plans it is "
                          "sure of can reach:", ""]
                lines += _advisors(fh["advisors"])
        pq = ttt["prediction"]["predicted_fc"]
        lines += ["Held-out rounds-to-target per family (reference predicted; a censored run "
                  "counts the chance that the interval holds it; in brackets the 95% interval "
                  "of the coverage from a bootstrap over workloads):", ""]
        ci = pq.get("coverage90_ci95") or {}
        lines += _table(["family", "median abs log error", "90% interval coverage"],
                        [[f, _num(pq["median_abs_log_error"][f]),
                          _pct(pq["coverage90"][f]) + (
                              f" ({_pct(ci[f][0])}-{_pct(ci[f][1])})" if ci.get(f) else "")]
                         for f in pq["coverage90"]])
    lines += ["## Fixed single-plan policies", "",
              "Always choosing one plan label, over the workloads where it is a candidate: the "
              "share of workloads whose SLA it meets and its median and geometric-mean cost "
              "ratio to the oracle. The advisor is only useful if it beats the best of these.",
              ""]
    lines += _table(["policy", "workloads", "meets the SLA", "median cost ratio",
                     "geometric-mean cost ratio"],
                    [[f"`{p['policy']}`", str(p["workloads"]), _pct(p["sla_met_rate"]),
                      _num(p["median_cost_ratio"]), _num(p.get("gmean_cost_ratio"))]
                     for p in s["policies"]])
    sr = s.get("seed_runs") or {}
    if sr:
        lines += ["", "Run by run: the share of each policy's seed runs that reach the target, "
                  "and its cost to the cheapest plan that reached the target in every seed (the "
                  "confident oracle; workloads without one are left out of the ratios). The "
                  "advisor is the planner as shipped (priors).", ""]
        lines += _table(
            ["policy", "workloads", "seed runs that reach the target",
             "picks reaching it in every seed", "median cost ratio to the confident oracle",
             "geometric-mean cost ratio to it"],
            [[name, str(f["workloads"]), _pct(f["seed_runs_reached"]),
              f"{f['picks_reached_every_seed']}/{f['workloads']}",
              _num(f["median_ratio_to_confident_oracle"]),
              _num(f["gmean_ratio_to_confident_oracle"])] for name, f in sr.items()])

    if s.get("baselines"):
        lines += baselines_section(s["baselines"])

    lines += ["## Definitions", "",
              "- **target**: the SLA's accuracy bound with `fc` = the measured mean final "
              "accuracy of the fully connected, uncompressed plan (Metropolis weights) over the "
              "seeds; the planner's own target (from its predicted `fc`) is in the detail rows.",
              "- **measured run**: every candidate is trained for the whole round budget; its "
              f"rounds are the first round {_judged_on(g)}, smoothed by a centred "
              "3-evaluation moving average, reaches the target, its cost the "
              "channel uses up to that round plus the statistics broadcast (when it never "
              "does: the whole run, a lower bound).",
              "- **meets the SLA**: reaches the target in a strict majority of the seeds, and "
              "the other SLA bounds hold for the seed means.",
              "- **oracle**: the cheapest candidate that meets the SLA (mean channel uses over "
              "seeds); ties: higher accuracy, then the plan label.",
              "- **advisor**: the plan the planner chooses for the workload's first seed "
              "(sketch statistics of that partition), costed with the estimator's priors, or "
              "with constants fitted on the runs of the other folds (never on the workload "
              "itself).",
              "- **regret**: accuracy = 100 (oracle - advisor) in points; cost = 100 (advisor - "
              "oracle) / oracle in percent; negative values favour the advisor.",
              "- **MAPE**: |predicted - measured| / measured rounds to the measured target, over "
              "runs that reached it; runs the model says never reach it are counted apart.", ""]

    lines += ["## Per workload", ""]
    rows = []
    for w in a.workloads:
        b, c = w.before, w.after
        rows.append([w.key, _pct(w.target), w.oracle.plan if w.oracle else "none",
                     b.advisor_plan + ("" if b.advisor_meets_sla else " (misses SLA)"),
                     (c.advisor_plan + ("" if c.advisor_meets_sla else " (misses SLA)"))
                     if c else "n/a",
                     f"{_yn(b.match)}/{_yn(c.match) if c else '-'}",
                     f"{_num(b.regret_acc_pts)}/{_num(c.regret_acc_pts) if c else '-'}",
                     f"{_num(b.regret_cost_pct, 1)}/{_num(c.regret_cost_pct, 1) if c else '-'}",
                     "-" if w.fold is None else w.fold])
    lines += _table(["workload", "target", "oracle", "advisor (priors)", "advisor (calibrated)",
                     "match p/c", "regret acc pts p/c", "regret cost % p/c", "fold"], rows)

    lines += ["## Precision, recall and F1 per topology family", ""]
    fams = sorted(set(before["family_scores"]) | set((after or {}).get("family_scores", {})))
    rows = []
    for f in fams:
        sb = before["family_scores"].get(f, {})
        sa = (after or {}).get("family_scores", {}).get(f, {})
        rows.append([f, sb.get("support", 0), sb.get("predicted", 0), _num(sb.get("precision")),
                     _num(sb.get("recall")), _num(sb.get("f1")), sa.get("predicted", "n/a"),
                     _num(sa.get("precision")), _num(sa.get("recall")), _num(sa.get("f1"))])
    lines += _table(["family", "oracle picks", "advisor picks (priors)", "precision", "recall",
                     "F1", "advisor picks (calibrated)", "precision", "recall", "F1"], rows)

    lines += ["## Rounds MAPE per family", ""]
    rows = []
    bf, af = before["rounds_mape_by_family"], (after or {}).get("rounds_mape_by_family", {})
    for f in sorted(set(bf) | set(af)):
        x, y = bf.get(f, {}), af.get(f, {})
        rows.append([f, x.get("n", 0) + x.get("unpredicted", 0), x.get("censored", 0),
                     _pctv(x.get("mape_pct")), x.get("unpredicted", 0),
                     _pctv(y.get("mape_pct")), y.get("unpredicted", "n/a")])
    lines += _table(["family", "uncensored runs", "censored runs", "MAPE (priors)",
                     "predicted never (priors)", "MAPE (calibrated, CV)",
                     "predicted never (calibrated)"], rows)

    lines += ["## Statistics-collection overhead", "",
              "Two ratios, both per workload (median / max over workloads):", ""]
    lines += _table(["ratio", "median", "max"], [
        ["label-statistics bytes of one client (class histogram or Count-Min sketch) / one "
         "model transmission (`stats_overhead` of ANALYZE WORKLOAD)",
         *_mm(ov["sketch_over_model_pct"])],
        ["statistics broadcast (N ceil(cells / 2) channel uses) / total channel uses of "
         "the advisor's pick to the target", *_mm(ov["broadcast_share_of_advisor_training_pct"])],
        ["the same for the calibrated advisor's pick",
         *_mm(ov["broadcast_share_of_calibrated_advisor_training_pct"])],
        ["the same for the oracle's plan", *_mm(ov["broadcast_share_of_oracle_training_pct"])]])

    lines += ["## Paired t-tests", "",
              "Pairs are (workload, seed) for the fixed-topology policies and workloads for the "
              "regret comparison; `scipy.stats.ttest_rel`, two-sided. A fixed policy uses the "
              "family's first listed variant, the first weights rule and "
              + (f"k = {g.baseline_k:g}" if g.baseline_k else "the workload's largest k")
              + ". Costs of runs that never reach the target are lower bounds.", ""]
    rows = [[t.name, t.n, _sig(t.mean_a), _sig(t.mean_b), _sig(t.mean_diff), _sig(t.t),
             _sig(t.p)] for t in a.ttests]
    lines += _table(["comparison (a vs b)", "n", "mean a", "mean b", "mean a - b", "t", "p"],
                    rows) if rows else ["No paired comparisons.", ""]

    ref = a.workloads[g.reference]
    lines += [f"## Per-topology table (reference workload `{ref.key}`)", "",
              "Fixed-topology plans; accuracy and fairness variance over the seeds (mean and "
              "standard deviation), cost = channel uses to the target normalised to "
              + ("ring" if any(r["family"] == "ring" for r in a.topology_table)
                 else "the cheapest family") + ".", ""]
    rows = [[r["family"], r["plan"], f"{r['accuracy_pct']:.1f} ± {r['accuracy_std_pct']:.1f}",
             _num(r["norm_cost"]),
             (f"{r['fairness_var_e3']:.1f}" + (f" ± {r['fairness_var_std_e3']:.1f}"
                                               if r["fairness_var_std_e3"] is not None else ""))
             if r["fairness_var_e3"] is not None else "n/a",
             f"{r['rounds']:.0f} ({r['reached']}/{r['seeds']})", _yn(r["meets_sla"])]
            for r in a.topology_table]
    lines += _table(["topology", "plan", "accuracy (%)", "norm. cost", "fairness var (1e-3)",
                     "rounds (seeds reaching)", "meets SLA"], rows)

    lines += ["## Fixed-topology policies over the whole grid", ""]
    rows = [[r["family"], r["workloads"], _num(r["accuracy_pct"], 1), _num(r["cost_vs_oracle"]),
             _pct(r["meets_sla"], 0), r["oracle"], r["advisor_priors"], r["advisor_calibrated"]]
            for r in a.family_table]
    lines += _table(["family", "workloads", "mean accuracy (%)", "cost / oracle cost",
                     "meets SLA", "oracle's family", "advisor picks (priors)",
                     "advisor picks (calibrated)"], rows)

    skew = s.get("label_skew") or []
    if skew:
        lines += ["## Label skew: D-Cliques and time-varying graphs against the fully connected "
                  "plan", "",
                  "Workloads with alpha <= 0.1 and a d_cliques candidate, at the fixed policies' "
                  "k. Channel uses to the target (the whole budget for a seed that never reaches "
                  "it): mean over the seeds +- its standard error; reached: seeds reaching the "
                  "target; best static: the cheapest other family meeting the SLA (without one, "
                  "the most accurate); time-varying: the same choice among the periodic "
                  "families (one-peer exponential, Base-(k+1)).", ""]

        def cell(r):
            if r is None:
                return "-"
            return (f"{_sig(r['cost'])} +- {_sig(r['cost_sem'])} ({r['reached']}/{r['seeds']}, "
                    f"acc {100 * r['accuracy']:.1f}%)")

        rows = [[r["workload"], cell(r["d_cliques"]), cell(r["complete"]),
                 (r["best_static"]["family"] + ": " + cell(r["best_static"]))
                 if r["best_static"] else "-",
                 (r["time_varying"]["family"] + ": " + cell(r["time_varying"]))
                 if r.get("time_varying") else "-",
                 _num(r["dcliques_over_fc"]), _num(r.get("time_varying_over_fc"))] for r in skew]
        lines += _table(["workload", "d_cliques", "complete", "best static family",
                         "time-varying", "d_cliques / complete", "time-varying / complete"],
                        rows)

    if a.scalability:
        lines += ["## Scalability extrapolation", "",
                  "The reference workload planned at other client counts in a scratch catalog; "
                  "rounds and channel uses are the cost model's predictions (calibrated: "
                  "constants fitted on all runs of this grid), not measurements. The broadcast "
                  "share is the statistics broadcast over the predicted total.", ""]
        by = defaultdict(dict)
        for r in a.scalability:
            by[(r["clients"], r["family"])][r["constants"]] = r
        rows = []
        for (n, fam), d in sorted(by.items()):
            p, c = d.get("priors"), d.get("calibrated")
            main = c or p
            rows.append([n, fam, _num(p["rounds"], 0) if p and p["rounds"] else "never",
                         (_num(c["rounds"], 0) if c["rounds"] else "never") if c else "n/a",
                         _sig(main["channel_uses"]), _pct(main["startup_share"], 2),
                         "yes" if main["advisor"] else ""])
        lines += _table(["N", "family", "rounds (priors)", "rounds (calibrated)",
                         "channel uses", "broadcast share", "advisor's pick"], rows)

    lines += ["## Cross-validation fits", "",
              "Per fold, a global fit on the other folds' runs and one per dataset starting from "
              "it; a held-out workload uses its dataset's constants (the global ones when its "
              "dataset could not be fitted). The last rows are the fits on all runs, used only "
              "for the extrapolation.", ""]
    rows = [["all" if f.fold is None else f.fold, f.scope, f.n_obs, _pctv(f.in_sample_mape),
             ", ".join(f"{k}={v:.3g}" for k, v in sorted((f.constants or {}).items())
                       if k != "u") or "no fit"] for f in list(a.folds) + list(a.all_fits)]
    lines += _table(["fold", "scope", "training runs", "in-sample MAPE", "constants"], rows) \
        if rows else ["No folds.", ""]

    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{p.stem}]({p.name})" for p in figures] + [""]
    if a.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in a.notes] + [""]
    return "\n".join(lines)


def _yn(v: bool | None) -> str:
    return "n/a" if v is None else ("yes" if v else "no")


def _pctv(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _regret(block: dict[str, Any] | None, key: str, median: bool = False) -> str:
    if block is None or block[key]["n"] == 0:
        return "n/a"
    st = block[key]
    parts = [st["mean"]] + ([st["median"]] if median else []) + [st["max"]]
    return " / ".join(f"{v:.2f}" for v in parts)


def _ceil(c: dict[str, Any]) -> str:
    if not c["n"]:
        return "n/a"
    return (f"{c['mean_abs_error_pts']:.1f} / {c['bias_pts']:+.1f} / "
            f"{c['max_abs_error_pts']:.1f} (n={c['n']})")


def _mape(block: dict[str, Any] | None) -> str:
    if block is None:
        return "n/a"
    return (f"{_pctv(block['rounds_mape_pct'])} (n={block['rounds_mape_n']}; "
            f"{block['rounds_unpredicted']})")


def _ov(st: dict[str, Any], median_only: bool = False) -> str:
    if st["n"] == 0:
        return "n/a"
    if median_only:
        return f"{st['median']:.2f}%"
    return f"{st['median']:.3f}% / {st['max']:.3f}%"


def _mm(st: dict[str, Any]) -> list[str]:
    if st["n"] == 0:
        return ["n/a", "n/a"]
    return [f"{st['median']:.3f}%", f"{st['max']:.3f}%"]


__all__ = ["render"]


def _band(b: dict[str, float] | None, fmt) -> str:
    if b is None:
        return "n/a"
    if b["min"] == b["max"]:
        return fmt(b["mean"])
    return f"{fmt(b['mean'])} [{fmt(b['min'])}-{fmt(b['max'])}]"


def _acc(x: float) -> str:
    return f"{100 * x:.1f}"


def _count(x: float) -> str:
    return f"{x:.3g}" if abs(x) >= 1e4 else f"{x:.0f}"


def baselines_section(b: dict[str, Any]) -> list[str]:
    """The paper's baselines as fixed policies (:mod:`.baselines`): the reference workload's
    table beside the paper's Table 3, the policies over the grid with the advisor choosing among
    them all, and the plans the ``ttt`` fit never saw."""
    lines = ["## The paper's baselines as fixed policies", "",
             f"Every plan the grid names, trained like any candidate. Reference workload "
             f"`{b['reference']}`: the mean over the seeds, in brackets the min-max over the "
             "seeds (rounds, channel uses and energy to the target; a seed that never reaches "
             "it counts its whole run, a lower bound); `cost / ref`: channel uses to the target "
             "over those of over-the-air D-SGD on the ring (the paper's normalisation; the fully "
             "connected reference where the grid has no ring). `ttt fit`: `seen`, or `widened` "
             f"for a transport or algorithm outside the shipped fit (transports "
             f"{', '.join(b['fitted_transports'])}; algorithms "
             f"{', '.join(b['fitted_algorithms'])}). The paper's columns are its Table 3 "
             "(CIFAR-10, N = 50, 10 dB; normalised cost), not this workload.", ""]
    rows = b["per_workload"].get(b["reference"], [])
    lines += _table(
        ["plan", "baseline", "accuracy %", "reached", "rounds to target",
         "channel uses to target", "energy to target (J)", "cost / ref", "meets the SLA",
         "ttt fit", "paper row", "paper acc. %", "paper cost"],
        [[f"`{r['plan']}`", r["baseline"], _band(r["accuracy"], _acc),
          f"{r['reached']}/{r['seeds']}", _band(r["rounds"], _count),
          _band(r["channel_uses"], _count), _band(r["energy_j"], lambda x: f"{x:.3g}"),
          _num(r["cost_over_reference"]), "yes" if r["meets_sla"] else "no",
          "seen" if r["fitted"] else "widened",
          *(r["paper"] or ["-", "-", "-"])] for r in rows])
    adv = b["advisor"]
    lines += [f"Over the grid's {adv['workloads']} workloads, each plan as a fixed policy "
              "(share of workloads whose SLA it meets, mean accuracy, cost ratio to the oracle) "
              f"and the advisor (`{adv['estimator']}`, as shipped) choosing among them all:", ""]
    lines += _table(
        ["policy", "baseline", "ttt fit", "workloads", "meets the SLA", "accuracy %",
         "median cost ratio", "geometric-mean cost ratio"],
        [[f"**advisor** (`{adv['estimator']}`)", "chooses among all",
          f"{adv['widened_picks']} widened pick(s)", str(adv["workloads"]),
          _pct(adv["sla_met_rate"]), _acc(adv["accuracy"]) if adv["accuracy"] is not None
          else "n/a", _num(adv["median_cost_ratio"]), _num(adv["gmean_cost_ratio"])]]
        + [[f"`{p['policy']}`", p["baseline"], "seen" if p["fitted"] else "widened",
            str(p["workloads"]), _pct(p["sla_met_rate"]), _acc(p["accuracy"]),
            _num(p["median_cost_ratio"]), _num(p["gmean_cost_ratio"])]
           for p in b["policies"]])
    lines += ["The advisor's pick and the oracle per workload:", ""]
    lines += _table(["workload", "advisor's pick", "meets the SLA", "cost ratio", "oracle"],
                    [[p["workload"], f"{p['baseline']}" + ("" if p["fitted"] else " (widened)"),
                      "yes" if p["meets_sla"] else "no", _num(p["cost_ratio"]),
                      p["oracle_baseline"] or "none met the SLA"]
                     for p in adv["picks"]])
    if b["unseen"]:
        lines += ["Plans the `ttt` fit has not seen (their rounds interval and P(meets SLA) are "
                  "widened, so the chance-constrained advisor is reluctant to pick them): "
                  + ", ".join(f"`{u}`" for u in b["unseen"]) + ".", ""]
    return lines
