"""benchmarks/pooled_advisor.py: the advisor, always fully connected and the best fixed policy
judged over the tasks of several grids at once."""

import importlib.util
from pathlib import Path

import pytest

from airplan_qo.evaluation.metrics import PlanSummary

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("pooled_advisor",
                                                  ROOT / "benchmarks" / "pooled_advisor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _s(task, plan, reached, cost):
    return PlanSummary(task, plan, plan.split()[0], 4, reached, 0.6, 0.0, cost, 10, None, None,
                       reached >= 3)


def _task(key, dataset, plans, advisor):
    summaries = {p: _s(key, p, r, c) for p, (r, c) in plans.items()}
    ok = [s for s in summaries.values() if s.meets_sla]
    return {"key": key, "dataset": dataset, "summaries": summaries,
            "oracle": min(ok, key=lambda s: s.cost) if ok else None, "advisor": advisor,
            "fc": "complete k=1"}


def test_pooled_figures_group_own_tails_and_pick_the_best_fixed_policy():
    mod = _module()
    tasks = [
        _task("g1: a", "mnist1d", {"complete k=1": (4, 1000.0), "b2 k=1 mix=34": (4, 100.0),
                                   "b2 k=1 mix=2 on complete": (4, 150.0)}, "b2 k=1 mix=34"),
        _task("g2: b", "mnist1d", {"complete k=1": (4, 1000.0), "b2 k=1 mix=42": (2, 90.0),
                                   "b2 k=1 mix=2 on complete": (4, 160.0)},
              "b2 k=1 mix=2 on complete"),
        _task("g2: c", "leaf_synthetic", {"complete k=1": (4, 500.0),
                                          "b2 k=1 mix=30": (0, 50.0),
                                          "b2 k=1 mix=2 on complete": (0, 60.0)},
              "complete k=1")]
    assert mod.fully_connected(tasks[0]["summaries"]) == "complete k=1"
    out = mod.judge(tasks)
    adv = out["advisor (priors)"]
    assert adv["tasks"] == 3 and adv["sla_met_rate"] == 1.0
    assert adv["seed_runs_reached"] == 1.0
    # ratios to the cheapest plan reaching the target in every seed: 1, 1, 1
    assert adv["median_ratio_to_confident_oracle"] == pytest.approx(1.0)
    # only always-complete meets every SLA; Base-2 with its own tail is one policy (mix=own)
    # that misses task b by a majority and task c
    assert "best fixed: complete k=1" in out
    assert out["always fully connected"]["gmean_ratio_to_confident_oracle"] == pytest.approx(
        (10.0 * (1000.0 / 160.0) * 1.0) ** (1 / 3))
    mnist = mod.judge(tasks[:2])
    assert "best fixed: b2 k=1 mix=2 on complete" in mnist
    assert mnist["best fixed: b2 k=1 mix=2 on complete"]["seed_runs_reached"] == 1.0


def test_picks_without_tails_are_judged_on_the_same_tasks():
    mod = _module()
    task = _task("g1: a", "mnist1d", {"complete k=1": (4, 1000.0), "b2 k=1 mix=34": (4, 100.0)},
                 "b2 k=1 mix=34")
    out = mod.judge([task], {"g1: a": "complete k=1"})
    plain = out["advisor (priors) without tails"]
    assert plain["tasks"] == 1 and plain["median_ratio_to_confident_oracle"] == pytest.approx(10.0)
    assert out["advisor (priors)"]["median_ratio_to_confident_oracle"] == pytest.approx(1.0)


def test_a_grid_without_tails_plans_none():
    from airplan_qo.evaluation.grid import load_grid

    mod = _module()
    grid = load_grid("hungry_onestep_snr")
    assert {w.mix_rounds for w in grid.workloads} == {"auto"}
    plain = mod.without_tails(grid)
    assert {w.mix_rounds for w in plain.workloads} == {0}
    assert [w.key for w in plain.workloads] == [w.key for w in grid.workloads]


def test_a_missing_catalog_for_the_level_holdout_is_a_one_line_error(tmp_path, capsys):
    import airplan_qo as aq

    mod = _module()
    catalog = tmp_path / "c.duckdb"
    with aq.connect(catalog):
        pass
    with pytest.raises(SystemExit) as exc:
        mod.main([f"quick={catalog}", "--level-holdout", str(tmp_path / "missing.duckdb")])
    assert exc.value.code == 2
    assert "no catalog at" in capsys.readouterr().err


def test_calibration_bins_plans_by_planned_p_and_names_the_oracles_p():
    mod = _module()
    a = _task("g1: a", "mnist1d", {"complete k=1": (4, 1000.0), "b2 k=1 mix=34": (4, 100.0),
                                   "b2 k=1 mix=2 on complete": (3, 150.0)}, "complete k=1")
    a["planned_p"] = {"complete k=1": 1.0, "b2 k=1 mix=34": 0.72,
                      "b2 k=1 mix=2 on complete": 0.93}
    b = _task("g1: b", "mnist1d", {"complete k=1": (4, 900.0), "b2 k=1 mix=34": (1, 80.0)},
              "complete k=1")
    b["planned_p"] = {"complete k=1": 0.999, "b2 k=1 mix=34": 0.75}
    out = mod.calibration([a, b])
    by = {(x["lo"], x["hi"]): x for x in out["bins"]}
    assert set(by) == {(0.7, 0.8), (0.9, 0.95), (0.99, 1.0)}
    # the two plans at P 0.72 and 0.75: 5 of 8 seed runs, one of them in every seed
    assert by[(0.7, 0.8)]["seed_runs"] == 8 and by[(0.7, 0.8)]["reached"] == pytest.approx(5 / 8)
    assert by[(0.7, 0.8)]["every_seed"] == pytest.approx(0.5)
    assert by[(0.99, 1.0)]["plans"] == 2 and by[(0.99, 1.0)]["reached"] == 1.0
    # per policy: Base-2 with its own tail (mix=34 in both tasks) is one policy
    own = next(r for r in out["policies"] if r["policy"] == "b2 k=1 mix=own")
    assert own["plans"] == 2 and own["mean_planned_p"] == pytest.approx(0.735)
    assert own["reached"] == pytest.approx(5 / 8)
    # task a's confident oracle is Base-2 with its own tail (P 0.72), task b's the complete graph
    assert out["confident_oracle_planned_p"] == [0.72, 0.999]
