"""Advisor evaluation: metric definitions on a hand-made table, grid files, the re-costed
advisor, and the quick grid end to end (report, figures, catalog rows, cache)."""

import json
import math
import time

import attrs
import numpy as np
import pytest
from scipy import stats

import airplan_qo as aq
from airplan_qo.cli import main
from airplan_qo.errors import ValidationError
from airplan_qo.evaluation import builtin_grids, load_grid, parse_grid, run_evaluation
from airplan_qo.evaluation import advisor
from airplan_qo.evaluation.metrics import (RunOutcome, assign_folds, compare, family_scores,
                                           mape, measured_target, oracle, outcome_from_curve,
                                           paired_test, summarize)
from airplan_qo.evaluation.runner import cache_key, measure
from airplan_qo.plans.sla import parse_sla

# ---- a hand-made table of measurements ------------------------------------------------------
#
# workload "w", 2 seeds, target already applied; costs are channel uses to the target.
#   ring A      reaches in 1 of 2 seeds            -> does not meet the SLA (no strict majority)
#   sw B        cost 100 and 120 (mean 110), acc 0.90 / 0.92
#   complete C  cost 110 and 110 (mean 110), acc 0.94 / 0.96   -> ties B on cost, more accurate
#   clust D     cost 200 and 220, acc 0.95 / 0.95
TABLE = [
    RunOutcome("w", "A", "ring", 0, 0.86, True, 30, 50.0),
    RunOutcome("w", "A", "ring", 1, 0.80, False, 40, 70.0),
    RunOutcome("w", "B", "small_world", 0, 0.90, True, 20, 100.0),
    RunOutcome("w", "B", "small_world", 1, 0.92, True, 24, 120.0),
    RunOutcome("w", "C", "complete", 0, 0.94, True, 10, 110.0),
    RunOutcome("w", "C", "complete", 1, 0.96, True, 10, 110.0),
    RunOutcome("w", "D", "clustered", 0, 0.95, True, 18, 200.0),
    RunOutcome("w", "D", "clustered", 1, 0.95, True, 22, 220.0),
]


def _by_plan(outcomes, sla=None, fc=None):
    return {s.plan: s for s in summarize(outcomes, sla, fc).values()}


def test_outcome_from_curve_counts_rounds_and_channel_uses_to_the_target():
    acc = [0.5, 0.7, None, 0.85, 0.9]
    costs = [10, 10, 10, 10, 10]
    assert outcome_from_curve(acc, costs, 5, 0.8) == (True, 4, 45.0)
    # smoothed over 3 evaluations: round 4 averages 0.7, 0.85, 0.9 (0.817 < 0.85)
    assert outcome_from_curve(acc, costs, 5, 0.85) == (True, 5, 55.0)
    # one lucky evaluation is not a crossing
    assert outcome_from_curve([0.5, 0.9, 0.5, 0.6, 0.6], costs, 0, 0.85) == (False, 5, 50.0)
    # never reached: the whole run, a lower bound
    assert outcome_from_curve(acc, costs, 5, 0.95) == (False, 5, 55.0)
    with pytest.raises(ValidationError):
        outcome_from_curve(acc, costs[:-1], 0, 0.8)


def test_seed_aggregation_is_the_mean_and_the_sla_needs_a_strict_majority():
    s = _by_plan(TABLE)
    assert s["B"].accuracy == pytest.approx(0.91) and s["B"].cost == pytest.approx(110)
    assert s["B"].rounds == pytest.approx(22) and s["B"].n_reached == 2
    assert s["B"].accuracy_std == pytest.approx(np.std([0.90, 0.92], ddof=1))
    assert not s["A"].meets_sla           # 1 of 2 seeds is not a strict majority
    assert s["B"].meets_sla and s["C"].meets_sla and s["D"].meets_sla
    three = [RunOutcome("v", "P", "ring", i, 0.9, i < 2, 10, 10.0) for i in range(3)]
    assert _by_plan(three)["P"].meets_sla  # 2 of 3
    with pytest.raises(ValidationError, match="seed measured twice"):
        summarize(TABLE + [TABLE[0]])


def test_oracle_is_the_cheapest_plan_meeting_the_sla_ties_by_accuracy_then_label():
    s = _by_plan(TABLE)
    assert oracle(s.values()).plan == "C"     # B and C cost 110; C is more accurate
    tie = [attrs.evolve(o, plan="E", family="exponential") for o in TABLE if o.plan == "C"]
    assert oracle(_by_plan(TABLE + tie).values()).plan == "C"   # C < E by label
    assert oracle([s["A"]]) is None


def test_other_sla_bounds_are_checked_on_the_seed_means():
    sla = parse_sla("accuracy >= 0.9 * fc AND rounds <= 15")
    s = _by_plan(TABLE, sla, 1.0)
    assert [p for p, v in sorted(s.items()) if v.meets_sla] == ["C"]
    sla = parse_sla("accuracy >= 0.9 AND channel_uses <= 105")
    assert oracle(_by_plan(TABLE, sla).values()) is None


def test_match_and_regret_definitions():
    s = _by_plan(TABLE)
    c = compare("w", "B", s)
    assert c.oracle_plan == "C" and c.oracle_family == "complete"
    assert c.match is False and c.family_match is False and c.advisor_meets_sla
    assert c.regret_acc_pts == pytest.approx(100 * (0.95 - 0.91))
    assert c.regret_cost_pct == pytest.approx(0.0)
    d = compare("w", "D", s)
    assert d.regret_cost_pct == pytest.approx(100 * (210 - 110) / 110)
    assert d.regret_acc_pts == pytest.approx(0.0)
    a = compare("w", "A", s)       # cheaper but misses the SLA: negative cost regret
    assert not a.advisor_meets_sla and a.regret_cost_pct == pytest.approx(100 * (60 - 110) / 110)
    assert compare("w", "C", s).match is True
    # the oracle is chosen among the candidates only (C could be a reference run)
    assert compare("w", "B", s, candidates=["A", "B", "D"]).oracle_plan == "B"
    with pytest.raises(ValidationError, match="not measured"):
        compare("w", "Z", s)


def test_family_precision_recall_f1():
    pairs = [("ring", "ring"), ("small_world", "ring"), ("small_world", "small_world"),
             ("complete", None)]
    sc = family_scores(pairs)
    assert set(sc) == {"ring", "small_world"}     # pairs without an oracle are left out
    assert sc["ring"].precision == 1.0 and sc["ring"].recall == 0.5
    assert sc["ring"].f1 == pytest.approx(2 / 3)
    assert sc["small_world"].precision == 0.5 and sc["small_world"].recall == 1.0
    assert sc["small_world"].support == 1 and sc["small_world"].predicted == 2
    only_oracle = family_scores([("ring", "clustered")])
    assert only_oracle["clustered"].precision is None and only_oracle["clustered"].recall == 0
    assert only_oracle["clustered"].f1 is None


def test_mape_leaves_out_never_predictions():
    value, n, never = mape([(110, 100), (None, 50), (45, 50)])
    assert value == pytest.approx(10.0) and n == 2 and never == 1
    assert mape([]) == (None, 0, 0)
    with pytest.raises(ValidationError):
        mape([(1, 0)])


def test_paired_t_test_matches_scipy():
    a, b = [0.91, 0.88, 0.93, 0.90], [0.85, 0.86, 0.90, 0.84]
    t = paired_test("x", a, b)
    ref = stats.ttest_rel(a, b)
    assert t.n == 4 and t.t == pytest.approx(ref.statistic) and t.p == pytest.approx(ref.pvalue)
    assert t.mean_diff == pytest.approx(np.mean(np.subtract(a, b)))
    assert paired_test("one", [1.0], [0.5]).p is None
    assert paired_test("constant", [1.0, 2.0], [0.5, 1.5]).t is None


def test_folds_are_seeded_balanced_and_capped():
    keys = [f"w{i}" for i in range(7)]
    f = assign_folds(keys, 3, seed=0)
    assert f == assign_folds(list(reversed(keys)), 3, seed=0)
    assert sorted(np.bincount(list(f.values())).tolist()) == [2, 2, 3]
    assert set(assign_folds(keys[:2], 5, seed=0).values()) == {0, 1}
    with pytest.raises(ValidationError):
        assign_folds(keys, 1, seed=0)


def test_folds_keep_near_duplicate_workloads_together():
    # SNR triplets and dropout variants of one (dataset, N, alpha) share a fold
    keys = [f"digits-{n}-{a}-{snr}" for n in (10, 20) for a in (0.1, 0.5, 1.0)
            for snr in (0, 10, 20)]
    groups = {k: tuple(k.split("-")[:3]) for k in keys}
    f = assign_folds(keys, 5, seed=0, groups=groups)
    for k in keys:
        assert all(f[j] == f[k] for j in keys if groups[j] == groups[k])
    assert len(set(f.values())) == 5
    with pytest.raises(ValidationError, match="2 groups"):
        assign_folds(keys[:3], 5, seed=0, groups=groups)


def test_measured_target_uses_the_measured_fc():
    assert measured_target(parse_sla("accuracy >= 0.95 * fc"), 0.9) == pytest.approx(0.855)
    assert measured_target(parse_sla("accuracy >= 0.8"), 0.9) == pytest.approx(0.8)


# ---- grid files -----------------------------------------------------------------------------

GRID = """
name = "t"
seeds = [3, 5]
folds = 2
[defaults]
dataset = "digits"
clients = 10
rounds = 5
sparsity = [1.0, 0.5]
topologies = ["ring", "small_world(k=4)", {family = "clustered", c = 2}]
[[workloads]]
alpha = [0.1, 1.0]
snr_db = [0, 20]
[[workloads]]
name = "iid"
partition = "iid"
topologies = ["complete"]
sla = "accuracy >= 0.8"
"""


def test_grid_expands_products_and_parses_topologies():
    g = parse_grid(GRID, source="t.toml")
    assert g.seeds == (3, 5) and g.folds == 2 and len(g.workloads) == 5
    w = g.workloads[0]
    assert w.key == "digits N=10 alpha=0.1 snr=0 partition=dirichlet"
    assert w.workload.seed == 3 and w.for_seed(5).seed == 5
    assert w.sparsity == (0.5, 1.0)
    assert w.topologies == (("ring", ()), ("small_world", (("k", 4),)),
                            ("clustered", (("c", 2),)))
    iid = g.workloads[-1]
    assert iid.key == "iid" and iid.sla == "accuracy >= 0.8"
    # 4 workloads x 3 topologies x 2 k + the iid one: complete k=1 and k=0.5, all x 2 seeds,
    # plus the fully connected reference of the 4 workloads without it
    assert g.n_runs == 2 * (4 * (6 + 1) + 2)
    assert g.with_seeds(3).seeds == (0, 1, 2)
    assert g.sha == parse_grid(GRID).sha


@pytest.mark.parametrize("text, key", [
    ('bogus = 1\n[[workloads]]\n', "bogus"),
    ('[[workloads]]\nalpha = -1\n', "workloads[0].alpha"),
    ('[[workloads]]\nseed = 3\n', "workloads[0].seed"),
    ('[[workloads]]\ntopologies = ["ringg"]\n', "workloads[0].topologies"),
    ('[[workloads]]\nsparsity = [0]\n', "workloads[0].sparsity"),
    ('[[workloads]]\nsnr = 3\n', "workloads[0].snr"),
    ('seeds = 0\n[[workloads]]\n', "seeds"),
    ('sla = "rounds <= 3"\n[[workloads]]\n', "sla"),
    ('folds = 1\n[[workloads]]\n', "folds"),
    ('name = "x"\n', "workloads"),
    ('[[workloads]]\nalpha = 0.5\n[[workloads]]\nalpha = 0.5\n', "workloads (#1)"),
])
def test_grid_errors_name_the_file_and_the_key(text, key):
    with pytest.raises(ValidationError) as err:
        parse_grid(text, source="bad.toml")
    assert "bad.toml" in str(err.value) and f"'{key}'" in str(err.value)


def test_shipped_grids_load_and_unknown_names_are_clear(tmp_path):
    assert {"default", "quick", "holdout"} <= set(builtin_grids())
    quick = load_grid("quick")
    assert quick.n_runs == 48 and quick.source == "builtin:quick"
    default = load_grid("default")
    assert len(default.workloads) == 70 and default.n_runs == 5676
    assert default.workloads[default.reference].key.startswith("digits N=20 alpha=0.5 snr=10 ")
    holdout = load_grid("holdout")   # judges the shipped ttt fit on workloads outside default
    assert holdout.estimator == "ttt" and len(holdout.workloads) == 20
    assert holdout.n_runs == 1440
    assert not {w.key for w in holdout.workloads} & {w.key for w in default.workloads}
    second = load_grid("holdout2")   # a second held-out set, with SLAs at 0.9 of fc on eight
    assert second.estimator == "ttt" and len(second.workloads) == 20 and second.n_runs == 1440
    assert not {w.workload for w in second.workloads} & {
        w.workload for g in (default, holdout) for w in g.workloads}
    assert sum(w.sla == "accuracy >= 0.9 * fc" for w in second.workloads) == 8
    with pytest.raises(ValidationError, match="did you mean 'quick'"):
        load_grid("quik")
    path = tmp_path / "g.toml"
    path.write_text("[[workloads]]\nclients = 12\n")
    assert load_grid(path).name == "g"
    path.write_text("[[workloads\n")
    with pytest.raises(ValidationError, match="not valid TOML"):
        load_grid(path)


# ---- the advisor, re-costed -----------------------------------------------------------------

def test_recosting_with_the_planners_constants_reproduces_its_choice():
    with aq.connect(":memory:") as db:
        for est, alpha, snr, ks in (("ttt", 0.1, 10.0, [0.1, 1.0]),
                                    ("ttt", 1.0, 20.0, [0.05, 0.3, 1.0]),
                                    ("dsgd", 0.1, 0.0, [0.1, 1.0]),
                                    ("dsgd", 1.0, 20.0, [0.05, 0.3, 1.0])):
            w = aq.Workload(dataset="digits", clients=12, alpha=alpha, snr_db=snr, rounds=40)
            result = db.plan(w, topologies=["ring", ("small_world", {"k": 4}), "clustered",
                                            "complete"], sparsity=ks, estimator=est)
            fc = next(c for c in result.candidates if c.plan == advisor.fc_plan(result))
            p = advisor.pick(result, result.context.constants, list(result.candidates), fc)
            assert p.label == result.chosen.plan.label()
            assert p.target == pytest.approx(result.target_accuracy)
            assert p.predicted_rounds == result.chosen.cost.rounds
        # constants that make every plan miss an absolute target fall back to the fc plan
        result = db.plan(w, sla="accuracy >= 0.8", topologies=["ring", "complete"],
                         sparsity=[0.1, 1.0], estimator="dsgd")
        fc = next(c for c in result.candidates if c.plan == advisor.fc_plan(result))
        bad = dict(result.context.constants, f0=0.5)
        p = advisor.pick(result, bad, [c for c in result.candidates if c is not fc], fc)
        assert p.fallback and p.label == fc.plan.label() and p.predicted_rounds is None
        assert not advisor.pick(result, None, list(result.candidates), fc).fallback


def test_cache_key_identifies_workload_seed_plan_and_budget():
    with aq.connect(":memory:") as db:
        w = aq.Workload(dataset="digits", clients=10, rounds=5)
        r = db.plan(w, topologies=["ring", "complete"], sparsity=[1.0], fallback="complete",
                    weights=["metropolis_hastings"], transports=["ota"], algorithms=["auto"])
        a, b = (c.plan for c in r.candidates)
        k = cache_key(w, a, 5)
        assert k == cache_key(aq.Workload(dataset="digits", clients=10, rounds=5), a, 5)
        assert len({k, cache_key(w, b, 5), cache_key(attrs.evolve(w, seed=1), a, 5),
                    cache_key(w, a, 6), cache_key(attrs.evolve(w, snr_db=3.0), a, 5)}) == 5
        # a mixing-only tail, and where it mixes, are part of the run
        ring = next(p for p in (a, b) if p.topology.family == "ring")
        own, on = attrs.evolve(ring, mix_rounds=2), attrs.evolve(ring, mix_rounds=2,
                                                                  mix_on="complete")
        assert len({cache_key(w, ring, 5), cache_key(w, own, 5), cache_key(w, on, 5)}) == 3


# ---- the quick grid, end to end -------------------------------------------------------------

FIGURES = {"confusion_matrix.png", "predicted_vs_actual_rounds.png", "pareto_fronts.png",
           "fairness_cdf.png", "accuracy_vs_dropout.png", "scalability.png"}


@pytest.mark.slow
def test_quick_grid_end_to_end_and_cached_rerun(tmp_path, capsys):
    catalog = str(tmp_path / "eval.duckdb")
    out = tmp_path / "out"
    assert main(["evaluate", "--quick", "--catalog", catalog, "--out", str(out),
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "plan match rate" in printed and "48 trained" in printed
    report = (out / "report.md").read_text()
    for heading in ("## Summary", "## Per workload", "## Precision, recall and F1",
                    "## Rounds MAPE per family", "## Statistics-collection overhead",
                    "## Paired t-tests", "## Per-topology table", "## Scalability",
                    "## Ceiling error and ranking error", "## Fixed single-plan policies",
                    "## Time-to-target advisor (cross-validated)"):
        assert heading in report
    assert FIGURES <= {p.name for p in out.iterdir()}
    assert all((out / f).stat().st_size > 1000 for f in FIGURES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 48 and summary["trained"] == 48 and summary["workloads"] == 3
    for block in ("uncalibrated", "calibrated"):
        rate = summary[block]["match_rate"]
        assert rate is None or 0 <= rate <= 1
        assert summary["ceiling"][block]["n"] >= 1
        ranking = summary["ranking_given_measured_fc"][block]
        assert ranking["within_noise_rate"] is None or 0 <= ranking["within_noise_rate"] <= 1
    # t-tests pair by workload (seed means), not by (workload, seed)
    assert summary["ttests"] and all(t["n"] <= 3 for t in summary["ttests"])
    ttt = summary["time_to_target"]                 # the cross-validated Tobit advisor
    for variant in ("measured_fc", "predicted_fc"):
        assert ttt[variant]["workloads"] == 3
        assert 0 <= ttt[variant]["within_noise_rate"] <= 1
        assert 0 <= ttt["prediction"][variant]["coverage90_all"] <= 1
    assert set(ttt["fit"]["plan"]["coef"]) >= {"log_inv_p", "log_inv_k", "choco"}
    nc = ttt["noise_ceiling"]                       # seeds 0 seen, 1 judged
    assert nc["seen_seeds"] == [0] and nc["judged_seeds"] == [1]
    assert nc["advisors"]["time-to-target advisor (reference predicted)"]["workloads"] == 3
    assert nc["full_hindsight"] is None             # 2 seeds: nothing above the majority rule
    assert {p["policy"] for p in summary["policies"]} >= {
        "complete [metropolis_hastings] k=1", "ring [metropolis_hastings] k=0.1"}

    with aq.connect(catalog) as db:
        cat = db.catalog
        (n_exec,) = cat.query("SELECT count(*) AS n FROM airplan.executions")[0].values()
        assert n_exec == 48
        ev = cat.query("SELECT * FROM airplan.evaluations")
        assert len(ev) == 1 and ev[0]["status"] == "succeeded"
        # 3 workloads in 2 (dataset, N, alpha) groups: the dropout variant shares a fold
        assert ev[0]["grid"] == "quick" and ev[0]["seeds"] == 2 and ev[0]["folds"] == 2
        rows = cat.query("SELECT * FROM airplan.evaluation_results ORDER BY workload_key, "
                         "calibrated")
        assert len(rows) == 6 and {r["calibrated"] for r in rows} == {False, True}
        for r in rows:
            assert r["oracle_plan"] is None or r["match"] == (r["advisor_plan"]
                                                              == r["oracle_plan"])
            detail = json.loads(r["detail"]) if isinstance(r["detail"], str) else r["detail"]
            assert len(detail["exec_ids"]) == 16
        # the advisor before calibration is the planner's own choice on this catalog
        assert all(json.loads(r["detail"])["planner_pick"] == r["advisor_plan"]
                   for r in rows if not r["calibrated"])

        # a second evaluation re-trains nothing: every run comes from the catalog
        again = run_evaluation(db, load_grid("quick"), out_dir=tmp_path / "again",
                               figures=False, scalability=False)
        assert again.summary["trained"] == 0 and again.summary["cached"] == 48
        (n_after,) = cat.query("SELECT count(*) AS n FROM airplan.executions")[0].values()
        assert n_after == n_exec
        assert again.summary["uncalibrated"] == summary["uncalibrated"]
        assert cat.query("SELECT status FROM airplan.evaluations WHERE evaluation_id = ?",
                         [again.evaluation_id])[0]["status"] == "succeeded"


def test_cli_evaluate_errors_exit_2(tmp_path, capsys):
    assert main(["evaluate"]) == 2
    assert "needs --grid" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[[workloads]]\nalpha = 'x'\n")
    assert main(["evaluate", "--grid", str(bad), "--catalog", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "workloads[0].alpha" in err
    assert main(["evaluate", "--quick", "--seeds", "0", "--catalog", ":memory:"]) == 2


def test_single_workload_without_oracle_still_reports(tmp_path):
    grid = parse_grid("""
seeds = 1
scalability_clients = [6, 8]
[[workloads]]
clients = 6
rounds = 3
local_steps = 1
sla = "accuracy >= 0.999"
topologies = ["ring"]
sparsity = [1.0]
""", source="tiny.toml")
    assert grid.n_runs == 2          # the ring and the fully connected reference
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        rep = run_evaluation(db, grid, out_dir=tmp_path / "o", figures=False)
        s = rep.summary
        assert s["no_oracle"] == 1 and s["calibrated"] is None and s["folds"] == 0
        assert s["uncalibrated"]["match_rate"] is None
        text = rep.report_path.read_text()
        assert "no candidate that meets the SLA" in text and "cross-validation needs" in text
        rows = db.catalog.query("SELECT * FROM airplan.evaluation_results")
        assert len(rows) == 1 and rows[0]["oracle_plan"] is None and rows[0]["match"] is None


#: A two-workload grid planned with the time-to-target estimator, 3 rounds per run.
TTT_GRID = """
seeds = 2
folds = 2
estimator = "ttt"
scalability_clients = [6, 8]
[[workloads]]
clients = 6
alpha = [0.1, 1.0]
rounds = 3
local_steps = 1
topologies = ["ring"]
sparsity = [1.0]
"""


def test_a_grid_planned_with_the_time_to_target_estimator_is_analysed(tmp_path):
    # the planning context of such a grid holds ttt's constants: the time-to-target analysis
    # must read each candidate's statistics, not dsgd's constants (beta_k, ...)
    grid = parse_grid(TTT_GRID, source="ttt.toml")
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        rep = run_evaluation(db, grid, out_dir=tmp_path / "o", figures=False)
    assert rep.summary["estimator"] == "ttt"
    ttt = rep.summary["time_to_target"]
    assert ttt is not None and set(ttt["prediction"]["predicted_fc"]["coverage90"]) == {"ring", "complete"}
    assert rep.summary["confidence"] is None and ttt["confidence"] == 0.95   # the default
    assert ttt["reference"]["metric"] == "accuracy"     # what the fit's rounds were judged on
    # the report opens with three lines on the shipped advisor against the best fixed policy
    report = (tmp_path / "o" / "report.md").read_text()
    short = report.split("## In short\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert report.index("## In short") < report.index("## Summary")
    assert len(short) == 3
    assert short[0].startswith("- **Advisor** (the planner's default cost model `ttt`, as "
                               "shipped): its pick met the SLA on ")
    seeds = rep.summary["seed_runs"]["advisor (priors)"]["seed_runs_reached"]
    assert short[0].endswith(f"; {100 * seeds:.1f}% of its seed runs reached the target.")
    assert short[1].startswith("- **Best fixed policy** (always `")
    assert short[2].startswith("- **So**: ")


def test_a_grid_is_planned_and_judged_at_its_confidence(tmp_path, monkeypatch):
    from airplan_qo.session import Session

    text = TTT_GRID.replace('estimator = "ttt"', 'estimator = "ttt"\nconfidence = 0.8')
    asked = []
    plan = Session.plan

    def recording(self, *args, **kwargs):
        asked.append(kwargs.get("confidence"))
        return plan(self, *args, **kwargs)

    monkeypatch.setattr(Session, "plan", recording)
    grid = parse_grid(text, source="conf.toml")
    assert grid.confidence == 0.8
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        rep = run_evaluation(db, grid.with_confidence(0.97), out_dir=tmp_path / "o",
                             figures=False)
    assert asked and set(asked) == {0.97}
    assert rep.summary["confidence"] == 0.97
    assert rep.summary["time_to_target"]["confidence"] == 0.97
    report = (tmp_path / "o" / "report.md").read_text()
    assert "chance-constraint confidence 0.97" in report and "--confidence 0.97" in report
    with pytest.raises(ValidationError, match="key 'confidence': confidence must be a prob"):
        parse_grid(text.replace("0.8", "1.5"), source="conf.toml")
    with pytest.raises(ValidationError, match="--confidence must be a probability"):
        grid.with_confidence(0)


def test_within_noise_match_uses_the_paired_seed_noise():
    from airplan_qo.evaluation.metrics import within_noise

    best = {0: 100.0, 1: 120.0, 2: 90.0}
    assert within_noise({0: 105.0, 1: 126.0, 2: 94.0}, best, True)        # +5%: under log 1.1
    assert not within_noise({0: 150.0, 1: 180.0, 2: 135.0}, best, True)   # +50% on every seed
    assert not within_noise({0: 100.0, 1: 120.0, 2: 90.0}, best, False)   # misses the SLA
    # a large but noisy excess: inside t * SE
    assert within_noise({0: 70.0, 1: 240.0, 2: 80.0}, best, True)


def test_policy_table_rates_and_ratios():
    from airplan_qo.evaluation.metrics import PlanSummary, policy_table

    def s(w, plan, cost, meets):
        return PlanSummary(w, plan, plan.split()[0], 3, 3 if meets else 0, 0.9, 0.0, cost, 10,
                           None, None, meets)

    table = policy_table({
        "w1": ({"ring k=1": s("w1", "ring k=1", 200, True),
                "complete k=1": s("w1", "complete k=1", 400, True)},
               s("w1", "ring k=1", 200, True)),
        "w2": ({"ring k=1": s("w2", "ring k=1", 300, False),
                "complete k=1": s("w2", "complete k=1", 150, True)},
               s("w2", "complete k=1", 150, True))})
    by = {r["policy"]: r for r in table}
    assert by["complete k=1"]["sla_met_rate"] == 1.0
    assert by["complete k=1"]["median_cost_ratio"] == pytest.approx(1.5)
    assert by["complete k=1"]["gmean_cost_ratio"] == pytest.approx(math.sqrt(2.0))  # 2 and 1
    assert by["ring k=1"]["sla_met_rate"] == 0.5
    assert table[0]["policy"] == "complete k=1"


def test_a_plan_with_its_own_tail_is_one_policy_across_workloads():
    """The tail on a plan's own topology has the planner's length for each workload (mix=34 at
    one N, mix=42 at another): "always Base-2 with its own tail" is one fixed policy, scored on
    every workload; a tail on the complete graph keeps its label."""
    from airplan_qo.evaluation.metrics import (PlanSummary, best_policy, policy_of,
                                               policy_plans, policy_table)

    assert policy_of("base_k(k=1) [prescribed] k=1 mix=34") == "base_k(k=1) [prescribed] k=1 mix=own"
    assert policy_of("base_k(k=1) [prescribed] k=1 mix=2 on complete") \
        == "base_k(k=1) [prescribed] k=1 mix=2 on complete"
    assert policy_of("ring k=0.3") == "ring k=0.3"

    def s(w, plan, cost, meets):
        return PlanSummary(w, plan, plan.split()[0], 4, 4 if meets else 2, 0.9, 0.0, cost, 10,
                           None, None, meets)

    per = {"w1": ({"b2 k=1 mix=34": s("w1", "b2 k=1 mix=34", 100, True),
                   "complete k=1": s("w1", "complete k=1", 1000, True)},
                  s("w1", "b2 k=1 mix=34", 100, True)),
           "w2": ({"b2 k=1 mix=42": s("w2", "b2 k=1 mix=42", 100, False),
                   "complete k=1": s("w2", "complete k=1", 500, True)},
                  s("w2", "complete k=1", 500, True))}
    by = {r["policy"]: r for r in policy_table(per)}
    assert set(by) == {"b2 k=1 mix=own", "complete k=1"}
    assert by["b2 k=1 mix=own"]["workloads"] == 2
    assert by["b2 k=1 mix=own"]["sla_met_rate"] == 0.5
    assert policy_plans("b2 k=1 mix=own", per["w2"][0]) == ["b2 k=1 mix=42"]
    # the best policy meets the SLA most often, then costs least
    assert best_policy(list(by.values()))["policy"] == "complete k=1"
    # a policy scored on under half as many workloads as the widest does not compete
    wide = {"policy": "wide", "workloads": 4, "sla_met_rate": 0.75, "median_cost_ratio": 2.0,
            "gmean_cost_ratio": 2.0}
    corner = {"policy": "corner", "workloads": 1, "sla_met_rate": 1.0, "median_cost_ratio": 1.0,
              "gmean_cost_ratio": 1.0}
    assert best_policy([corner, wide])["policy"] == "wide"
    assert best_policy([]) is None




def _runs(plan, reached, cost):
    """RunOutcomes of plan P on seeds 0..len-1 of workload 'w'."""
    return [RunOutcome("w", plan, plan, i, 0.9, r, 10, c)
            for i, (r, c) in enumerate(zip(reached, cost))]


def test_hindsight_pick_is_the_cheapest_plan_reaching_in_enough_seen_seeds():
    from airplan_qo.evaluation.metrics import hindsight_pick

    outs = (_runs("cheap", [True, False, True, True], [10, 16, 10, 10])
            + _runs("mid", [True, True, False, False], [20, 20, 90, 90])
            + _runs("dear", [True, True, True, True], [50, 50, 50, 50]))
    # seeds 0, 1: "cheap" reached once (mean cost 13), "mid" twice (20), "dear" twice (50)
    assert hindsight_pick(outs, ["cheap", "mid", "dear"], [0, 1], 2) == "mid"
    assert hindsight_pick(outs, ["cheap", "mid", "dear"], [0, 1], 1) == "cheap"
    assert hindsight_pick(outs, ["cheap", "dear"], [0, 1], 2) == "dear"   # "mid" no candidate
    assert hindsight_pick(outs, ["cheap"], [0, 1], 2) is None


def test_noise_ceiling_judges_every_advisor_on_the_unseen_half_of_the_seeds():
    from airplan_qo.evaluation.metrics import noise_ceiling

    # seeds 0-2 are seen, 3-5 judged. "flaky" reaches on seeds 0, 2 and 3 only: the majority
    # hindsight advisor (2 of 3 seen) takes it and misses the SLA on the judged seeds (1 of 3);
    # the every-seed one takes "solid", the judged oracle.
    outs = (_runs("flaky", [True, False, True, True, False, False], [10, 40, 10, 10, 40, 40])
            + _runs("solid", [True] * 6, [30] * 6) + _runs("dear", [True] * 6, [90] * 6))
    nc = noise_ceiling({"w": (None, ("flaky", "solid", "dear"), "dear")}, outs,
                       {"always dear": {"w": "dear"}}, range(6))
    assert nc["seen_seeds"] == [0, 1, 2] and nc["judged_seeds"] == [3, 4, 5]
    rows = nc["advisors"]
    every = rows["hindsight: every seen seed reached"]
    assert every["within_noise_rate"] == 1.0 and every["advisor_meets_sla_rate"] == 1.0
    assert every["median_cost_ratio"] == pytest.approx(1.0)
    most = rows["hindsight: most seen seeds reached"]
    assert most["advisor_meets_sla_rate"] == 0.0 and most["within_noise_rate"] == 0.0
    dear = rows["always dear"]
    assert dear["advisor_meets_sla_rate"] == 1.0 and dear["within_noise_rate"] == 0.0
    assert dear["median_cost_ratio"] == pytest.approx(3.0)
    assert noise_ceiling({"w": (None, ("solid",), "solid")}, outs, {}, [0]) is None


def test_full_hindsight_knows_every_seed_and_stays_above_the_majority_rule():
    from airplan_qo.evaluation.metrics import full_hindsight

    # 4 seeds: "flaky" reaches in 3 (the oracle by the majority rule, the cheapest), "solid" in
    # all 4 at 1.5x its cost; "dear" in all 4 at 3x
    outs = (_runs("flaky", [True, True, True, False], [10, 10, 10, 12])
            + _runs("solid", [True] * 4, [20] * 4) + _runs("dear", [True] * 4, [60] * 4))
    fh = full_hindsight({"w": (None, ("flaky", "solid", "dear"), "dear")}, outs, range(4))
    assert fh["seeds"] == [0, 1, 2, 3]
    # m = 4 only: m = 3 is the majority rule of 4 seeds, which picks the oracle itself
    assert list(fh["advisors"]) == ["hindsight: reached in all 4 seeds"]
    row = fh["advisors"]["hindsight: reached in all 4 seeds"]
    assert row["advisor_meets_sla_rate"] == 1.0
    assert row["median_cost_ratio"] == pytest.approx(20 / 10.5)
    assert row["within_noise_rate"] == 0.0     # about twice the cost on every seed
    fh6 = full_hindsight({"w": (None, ("flaky", "solid", "dear"), "dear")},
                         _runs("solid", [True] * 6, [20] * 6), range(6))
    assert list(fh6["advisors"]) == ["hindsight: reached in all 6 seeds",
                                     "hindsight: reached in at least 5 of 6 seeds"]
    assert full_hindsight({"w": (None, ("solid",), "solid")}, outs, [0, 1]) is None


PARALLEL_GRID = """
seeds = 2
scalability_clients = [6, 8]
[defaults]
clients = 6
rounds = 4
local_steps = 1
topologies = ["ring", "complete"]
sparsity = [1.0]
[[workloads]]
alpha = [0.1, 1.0]
"""


def _measured_rows(cat):
    """Every recorded value of a catalog's runs, keyed by execution (wall times left out)."""
    execs = cat.query(
        "SELECT exec_id, plan_id, status, reason, actual_rounds, final_accuracy, final_loss, "
        "client_acc_mean, client_acc_var, jain_fairness, data_seed, train_seed, channel_seed, "
        "options->>'$.evaluation.cache_key' AS cache_key, "
        "options->'$.evaluation.client_accuracies' AS client_accuracies, options "
        "FROM airplan.executions ORDER BY exec_id")
    for e in execs:   # the whole options document, the training's wall time aside
        options = json.loads(e["options"])
        options["evaluation"].pop("wall_s")
        e["options"] = options
    cols = [c for c in ("exec_id", "round", "test_accuracy", "client_acc_mean",
                        "client_acc_min", "train_loss", "consensus_distance", "channel_uses",
                        "slots", "energy_j", "bits", "link_drop_rate", "dropout_rate")]
    rounds = cat.query(f"SELECT {', '.join(cols)} FROM airplan.round_stats "
                       "ORDER BY exec_id, round")
    feedback = cat.query("SELECT exec_id, plan_id, metric, estimated, actual, model_term, "
                         "censored FROM airplan.feedback ORDER BY exec_id, metric")
    return execs, rounds, feedback


#: Summary entries that measure time (or name the output folder), not results.
_TIMING = ("wall_s", "measure_s", "timing", "train_seconds", "seconds_per_trained_run",
           "report", "figures")


def test_parallel_workers_record_the_same_rows_as_a_serial_evaluation(tmp_path, monkeypatch):
    from airplan_qo.evaluation import runner
    from airplan_qo.runtime import execution

    grid = parse_grid(PARALLEL_GRID, source="parallel.toml")
    assert grid.n_runs == 8
    here = []   # runs the evaluating process trained itself instead of waiting for the pool
    train_here = runner.train_here
    monkeypatch.setattr(runner, "train_here", lambda job: here.append(job) or train_here(job))
    # the worker process is kept busy for its first 3 s (it starts in well under a second from
    # the fork server), so runs wait in the pool's queue and this process trains some of them
    from airplan_qo.evaluation import executors

    start_pool = executors.start_pool

    def busy_pool(*args, **kwargs):
        pool = start_pool(*args, **kwargs)
        pool.submit(time.sleep, 3.0)
        return pool
    monkeypatch.setattr(executors, "start_pool", busy_pool)
    batches = []   # the runs returned by workers are recorded a workload at a time
    batch = execution.record_trained_batch
    monkeypatch.setattr(execution, "record_trained_batch",
                        lambda cat, runs: batches.append(len(runs)) or batch(cat, runs))
    rows, lines, summaries = {}, {}, {}
    for workers in (1, 2):
        lines[workers] = []
        with aq.connect(str(tmp_path / f"w{workers}.duckdb")) as db:
            rep = run_evaluation(db, grid, out_dir=tmp_path / f"o{workers}", figures=False,
                                 scalability=False, workers=workers,
                                 progress=lines[workers].append)
            assert rep.summary["trained"] == 8
            summaries[workers] = {k: v for k, v in rep.summary.items() if k not in _TIMING}
            rows[workers] = _measured_rows(db.catalog)
            # nothing is left running; every run is tagged and reusable
            assert {r["status"] for r in rows[workers][0]} == {"succeeded"}
            again = run_evaluation(db, grid, out_dir=tmp_path / f"again{workers}",
                                   figures=False, scalability=False, workers=2)
            assert again.summary["trained"] == 0 and again.summary["cached"] == 8
    execs, rounds, feedback = rows[2]
    assert len(execs) == 8 and len(rounds) == 8 * 4 and len(feedback) == 8 * 4
    assert rows[2] == rows[1]          # bit for bit: ids, statuses, accuracies, curves
    assert summaries[2] == summaries[1]    # the report's every figure
    # with 2 workers: one worker process, and this process trained runs while it waited
    assert here
    assert batches == [4, 4]   # serial runs are recorded as they train; a re-run records none
    progress = [m for m in lines[2] if m.startswith("workload ")]
    assert len(progress) == 2 and all("(4 trained, 0 cached)" in m for m in progress)


def test_workers_must_be_a_positive_integer(tmp_path, capsys):
    with aq.connect(":memory:") as db:
        with pytest.raises(ValidationError, match="workers must be a positive integer"):
            run_evaluation(db, parse_grid(PARALLEL_GRID), out_dir=tmp_path, figures=False,
                           workers=0)
    assert main(["evaluate", "--quick", "--workers", "0", "--catalog", ":memory:"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


def test_interrupted_parallel_evaluation_keeps_recorded_runs_and_a_rerun_continues(tmp_path):
    grid = parse_grid(PARALLEL_GRID, source="parallel.toml")

    def ctrl_c_after_first_workload(message):
        if message.startswith("workload 1/"):
            raise KeyboardInterrupt   # the second workload's runs are training meanwhile

    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        cat = db.catalog
        with pytest.raises(KeyboardInterrupt):
            run_evaluation(db, grid, out_dir=tmp_path / "o", figures=False,
                           scalability=False, workers=2, progress=ctrl_c_after_first_workload)
        assert cat.query("SELECT status FROM airplan.evaluations")[0]["status"] == "aborted"
        execs = cat.query("SELECT exec_id, status FROM airplan.executions ORDER BY exec_id")
        assert [e["status"] for e in execs] == ["succeeded"] * 4   # only workload 1, complete
        (n_rounds,) = cat.query("SELECT count(*) AS n FROM airplan.round_stats")[0].values()
        assert n_rounds == 4 * 4
        again = run_evaluation(db, grid, out_dir=tmp_path / "again", figures=False,
                               scalability=False, workers=2)
        assert again.summary["trained"] == 4 and again.summary["cached"] == 4


def test_a_run_interrupted_in_the_evaluating_process_trains_no_further_run(monkeypatch):
    """While it waits for the pool, the evaluating process trains queued runs itself; when
    Ctrl-C (or SIGTERM) stops such a run (``aborted``), it raises KeyboardInterrupt instead of
    going on with the queue while the signal is spent."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from airplan_qo.evaluation import runner

    trained = []

    def aborted(job):
        trained.append(job)
        return SimpleNamespace(status="aborted"), 0.1

    monkeypatch.setattr(runner, "train_here", aborted)
    with aq.connect(":memory:") as db:
        trainer = runner._Trainer(db, workers=2)
        trainer.queued.extend([("first", Future()), ("second", Future())])
        with pytest.raises(KeyboardInterrupt):
            trainer._train_one_here()
    assert trained == ["first"]


DCLIQUES_GRID = """
name = "dcliques"
seeds = 1
folds = 2
[defaults]
dataset = "digits"
model = "logistic"
rounds = 3
sparsity = [1.0]
weights = ["metropolis_hastings"]
[[workloads]]
clients = 10
alpha = [0.1, 1.0]
topologies = ["ring", "d_cliques(size=5)"]
"""


def test_grids_measure_d_cliques_built_from_the_statistics(tmp_path):
    """A grid names d_cliques without its cliques: the planner forms them from ANALYZE WORKLOAD
    and the runner trains that candidate."""
    from airplan_qo.evaluation.runner import measure

    grid = parse_grid(DCLIQUES_GRID, source="dcliques.toml")
    with aq.connect(tmp_path / "c.duckdb") as db:
        measured = measure(db, grid)
    for m in measured:
        families = {r.family for r in m.runs}
        assert {"ring", "d_cliques"} <= families          # (and the fully connected reference)
        cand = next(c for c in m.seeds[0].candidates if c.plan.topology.family == "d_cliques")
        assert dict(cand.plan.topology.params)["cliques"]          # formed from the statistics


def test_label_skew_table_compares_d_cliques_with_the_fully_connected_plan(tmp_path):
    grid = parse_grid(DCLIQUES_GRID.replace('seeds = 1', 'seeds = 2').replace(
        '"d_cliques(size=5)"]', '"d_cliques(size=5)", "one_peer_exponential", "complete"]'),
        source="dcliques.toml")
    with aq.connect(tmp_path / "c.duckdb") as db:
        report = run_evaluation(db, grid, out_dir=tmp_path / "out", figures=False,
                                scalability=False)
    rows = report.summary["label_skew"]
    assert [r["workload"] for r in rows] == ["digits N=10 alpha=0.1 snr=10"]   # alpha <= 0.1
    row = rows[0]
    assert row["d_cliques"]["family"] == "d_cliques" and row["complete"]["family"] == "complete"
    assert row["best_static"]["family"] == "ring" and row["d_cliques"]["seeds"] == 2
    assert row["dcliques_over_fc"] == pytest.approx(row["d_cliques"]["cost"]
                                                    / row["complete"]["cost"])
    # the periodic family (weights 'prescribed') has its fixed policy, in its own column
    assert row["time_varying"]["family"] == "one_peer_exponential"
    assert row["time_varying_over_fc"] == pytest.approx(row["time_varying"]["cost"]
                                                        / row["complete"]["cost"])
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Label skew: D-Cliques and time-varying graphs against the fully connected" in text
    assert "one_peer_exponential: " in text


def test_censored_coverage_is_the_chance_the_interval_holds_a_run_past_its_budget():
    from scipy import stats

    from airplan_qo.evaluation.ttt_crossval import censored_coverage

    log_b = math.log(40.0)
    # predictive median far above the budget: the run's quantile is uniform on about [0, 1]
    assert censored_coverage(log_b, log_b + 10.0, 0.3) == pytest.approx(0.9, abs=1e-9)
    # the budget at the median: quantiles 0.5-1, of which 0.5-0.95 are inside
    assert censored_coverage(log_b, log_b, 0.3) == pytest.approx(0.9)
    # the budget at the 90th percentile: quantiles 0.9-1, half of them inside
    mu = log_b - stats.norm.ppf(0.9) * 0.3
    assert censored_coverage(log_b, mu, 0.3) == pytest.approx(0.5)
    # a run the model was sure would finish in time is a miss
    assert censored_coverage(log_b, log_b - 1.0, 0.3) == 0.0
    assert censored_coverage(log_b, log_b - 100.0, 0.3) == 0.0


def test_workload_bootstrap_resamples_workloads_not_runs():
    from airplan_qo.evaluation.ttt_crossval import workload_bootstrap

    # every workload alike: no spread, whatever the number of runs
    assert workload_bootstrap({"a": [1.0, 0.0], "b": [0.0, 1.0]}) == pytest.approx([0.5, 0.5])
    # two workloads, all runs covered in one and none in the other: 1000 runs each, but the
    # interval spans what resampling two workloads gives (near 0 to near 1), not a run-level
    # binomial's +-3 points
    lo, hi = workload_bootstrap({"a": [1.0] * 1000, "b": [0.0] * 1000})
    assert lo == pytest.approx(0.0) and hi == pytest.approx(1.0)
    ten = {f"w{i}": [float(i % 2)] * 5 for i in range(10)}
    lo, hi = workload_bootstrap(ten)
    assert 0.1 < lo < 0.5 < hi < 0.9
    assert workload_bootstrap(ten) == workload_bootstrap(ten)      # a fixed seed
    assert workload_bootstrap({"a": [1.0]}) is None


def test_report_shows_full_hindsight_with_three_seeds(tmp_path):
    grid = parse_grid(PARALLEL_GRID.replace("seeds = 2", "seeds = 3"), source="three.toml")
    with aq.connect(str(tmp_path / "three.duckdb")) as db:
        rep = run_evaluation(db, grid, out_dir=tmp_path / "out", figures=False,
                             scalability=False, workers=1)
    fh = rep.summary["time_to_target"]["noise_ceiling"]["full_hindsight"]
    assert fh["seeds"] == [0, 1, 2]
    assert list(fh["advisors"]) == ["hindsight: reached in all 3 seeds"]
    assert fh["advisors"]["hindsight: reached in all 3 seeds"]["workloads"] == 2
    text = (tmp_path / "out" / "report.md").read_text()
    assert "**Full hindsight.**" in text and "| hindsight: reached in all 3 seeds |" in text


def test_seed_run_figures_judge_picks_against_the_confident_oracle():
    from airplan_qo.evaluation.metrics import PlanSummary, seed_run_figures

    def s(w, plan, cost, reached):
        return PlanSummary(w, plan, plan.split()[0], 4, reached, 0.9, 0.0, cost, 10, None,
                           None, reached > 2)

    summaries = {
        "w1": {"ring k=1": s("w1", "ring k=1", 100, 3),             # cheap, misses one seed
               "complete k=1": s("w1", "complete k=1", 300, 4)},    # the confident oracle
        "w2": {"ring k=1": s("w2", "ring k=1", 50, 2),
               "complete k=1": s("w2", "complete k=1", 80, 3)}}     # no plan reaches all 4
    out = seed_run_figures({"w1": "ring k=1", "w2": "complete k=1"}, summaries)
    assert out["workloads"] == 2
    assert out["seed_runs_reached"] == pytest.approx((3 + 3) / 8)
    assert out["picks_reached_every_seed"] == 0
    assert out["with_confident_oracle"] == 1
    assert out["median_ratio_to_confident_oracle"] == pytest.approx(100 / 300)
    fc = seed_run_figures({"w1": "complete k=1", "w2": "complete k=1", "w3": "x"}, summaries)
    assert fc["workloads"] == 2 and fc["picks_reached_every_seed"] == 1
    assert fc["gmean_ratio_to_confident_oracle"] == pytest.approx(1.0)


def test_the_ttt_analysis_reports_per_task_and_fits_a_model_shift(tmp_path):
    from airplan_qo.evaluation.metrics import seed_run_figures

    # two tasks on one dataset: the MLP (the datasets' levels) and logistic (a model shift)
    text = TTT_GRID.replace("clients = 6\n", 'clients = 6\nmodel = ["mlp", "logistic"]\n')
    grid = parse_grid(text, source="tasks.toml")
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        rep = run_evaluation(db, grid, out_dir=tmp_path / "o", figures=False)
    ttt = rep.summary["time_to_target"]
    tasks = {t["task"]: t for t in ttt["per_task"]}
    assert set(tasks) == {"digits", "digits (logistic)"}
    for t in tasks.values():
        assert t["workloads"] == 2
        assert t["best_fixed_policy"].split(" ")[0] in {"ring", "complete"}
        for policy in ("advisor", "fully_connected"):
            f = t[policy]
            assert f["workloads"] == 2 and 0.0 <= (f["seed_runs_reached"] or 0.0) <= 1.0
    ref = ttt["reference"]
    assert "fc.model:logistic" in ref["constants"] and "ceil.model:logistic" in ref["constants"]
    assert "fc.model:mlp" not in ref["constants"]
    assert ref["range"]["models"] == ["logistic", "mlp"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert "| digits (logistic) | 2 | advisor |" in report
    # run by run, the advisor as planned (priors) beside always fully connected and the best
    # fixed policy, over every workload
    runs = rep.summary["seed_runs"]
    best = rep.summary["policies"][0]["policy"]
    assert list(runs) == ["advisor (priors)", "always the fully connected reference",
                          f"best fixed: {best}"]
    fc = runs["always the fully connected reference"]
    assert fc["workloads"] == 4 and 0.0 <= fc["seed_runs_reached"] <= 1.0
    picks = {w.key: w.before.advisor_plan for w in rep.analysis.workloads}
    assert runs["advisor (priors)"] == seed_run_figures(
        picks, {w.key: w.summaries for w in rep.analysis.workloads})
    assert "| advisor (priors) | 4 |" in report


def test_an_average_model_sla_is_judged_on_the_average_models_curve(tmp_path):
    # the same runs, judged once on the clients' mean and once on the average model
    text = TTT_GRID.replace("alpha = [0.1, 1.0]", "alpha = 0.1")
    curves = {}
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        for sla in ("accuracy >= 0.9 * fc", "avg_model_accuracy >= 0.9 * fc"):
            grid = parse_grid(text.replace("[[workloads]]", f'sla = "{sla}"\n[[workloads]]'),
                              source="avg.toml")
            (m,) = measure(db, grid)
            curves[sla.split()[0]] = {r.exec_id: (r.final_accuracy, r.accuracy) for r in m.runs}
        stats = {(r["exec_id"], r["round"]): r for r in db.catalog.query(
            "SELECT exec_id, round, test_accuracy, client_acc_mean FROM airplan.round_stats")}
        finals = {r["exec_id"]: r for r in db.catalog.query(
            "SELECT exec_id, final_accuracy, client_acc_mean FROM airplan.executions")}
    assert curves["accuracy"].keys() == curves["avg_model_accuracy"].keys()  # cached: the same
    for eid, (final, acc) in curves["avg_model_accuracy"].items():
        assert final == finals[eid]["final_accuracy"]
        assert list(acc) == [stats[(eid, r)]["test_accuracy"] for r in range(1, len(acc) + 1)]
    for eid, (final, acc) in curves["accuracy"].items():
        assert final == finals[eid]["client_acc_mean"]
        assert list(acc) == [stats[(eid, r)]["client_acc_mean"] for r in range(1, len(acc) + 1)]
    assert any(curves["accuracy"][e] != curves["avg_model_accuracy"][e] for e in curves["accuracy"])


def test_a_grid_judges_one_accuracy_metric():
    text = TTT_GRID.replace("alpha = [0.1, 1.0]", "alpha = 0.1") + """
[[workloads]]
clients = 6
rounds = 3
sla = "avg_model_accuracy >= 0.9 * fc"
topologies = ["ring"]
sparsity = [1.0]
"""
    with pytest.raises(ValidationError, match=r"grid mixed.toml: key 'sla': the workloads' SLAs "
                                              r"bound accuracy and avg_model_accuracy; one grid"):
        parse_grid(text, source="mixed.toml")


def test_sla_override_rejudges_every_workload_and_refuses_several_slas():
    grid = parse_grid(TTT_GRID, source="ttt.toml")
    over = grid.with_sla("avg_model_accuracy >= 0.9 * fc")
    assert {w.sla for w in over.workloads} == {"avg_model_accuracy >= 0.9 * fc"}
    assert [w.workload for w in over.workloads] == [w.workload for w in grid.workloads]
    assert over.sla_override == "avg_model_accuracy >= 0.9 * fc" and grid.sla_override is None
    with pytest.raises(ValidationError, match="--sla"):
        grid.with_sla("rounds <= 10")           # no accuracy bound
    twice = parse_grid(TTT_GRID.replace("[[workloads]]", '[[workloads]]\nsla = ["accuracy >= '
                                        '0.9 * fc", "accuracy >= 0.8 * fc"]'), source="2.toml")
    with pytest.raises(ValidationError, match="judges some workloads at several SLAs"):
        twice.with_sla("accuracy >= 0.9 * fc")


def test_a_grid_measures_plans_with_and_without_their_mixing_only_tails(tmp_path):
    text = TTT_GRID.replace("alpha = [0.1, 1.0]", "alpha = 0.5").replace(
        "rounds = 3", "rounds = 24").replace('topologies = ["ring"]',
                                             'topologies = ["ring", "complete"]')
    grid = parse_grid(text.replace("[[workloads]]", '[[workloads]]\nmix_rounds = "auto"'),
                      source="tails.toml")
    (ws,) = grid.workloads
    # the ring without a tail, with its own and with one on the complete graph; the complete
    assert ws.mix_rounds == "auto" and ws.n_plans() == 4
    # a grid that does not say plans none, whatever the planner's default
    (plain,) = parse_grid(text, source="plain.toml").workloads
    assert plain.mix_rounds == 0 and plain.n_plans() == 2
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        (m,) = measure(db, grid)
        labels = {r.plan for r in m.runs}
        tails = db.catalog.query("SELECT DISTINCT p.mix_rounds FROM airplan.executions e "
                                 "JOIN airplan.plans p USING (plan_id) WHERE p.mix_rounds > 0")
    assert any(label.endswith(f"mix={t['mix_rounds']}") for label in labels for t in tails)
    assert "ring [metropolis_hastings] k=1" in labels
    assert "ring [metropolis_hastings] k=1 mix=2 on complete" in labels
    with pytest.raises(ValidationError, match=r"key 'workloads\[0\].mix_rounds': mix_rounds must"):
        parse_grid(text.replace("[[workloads]]", '[[workloads]]\nmix_rounds = "often"'),
                   source="bad.toml")
