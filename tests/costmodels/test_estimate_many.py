"""Costing many plans at once (``estimate_many``) gives exactly the per-plan estimates."""

import attrs
import pytest

import airplan_qo as aq
from airplan_qo.costmodels import ESTIMATORS, estimate_many, refuser
from airplan_qo.plans.pilot import ReferencePilot


@pytest.fixture(scope="module")
def planned():
    with aq.connect(":memory:") as db:
        yield {model: db.plan(aq.Workload(dataset="digits", clients=12, alpha=0.5, snr_db=10,
                                          dropout=0.1, model=model))
               for model in ("mlp", "cnn4")}   # cnn4: a model the shipped fit has not seen


def _pilot(budget: int) -> ReferencePilot:
    return ReferencePilot(exec_id=1, rounds=20, budget=budget,
                          accuracy=tuple(0.9 * (1 - 0.9 ** t) for t in range(1, 21)),
                          metric=tuple(0.88 * (1 - 0.9 ** t) for t in range(1, 21)),
                          n_classes=10, channel_uses=1.0, energy_j=1.0, airtime_s=1.0,
                          bits=1.0, slots=1.0)


@pytest.mark.parametrize("model", ["mlp", "cnn4"])
@pytest.mark.parametrize("with_pilot", [False, True])
@pytest.mark.parametrize("target", [0.5, 0.8, 0.999])   # 0.999: above the predicted fc
def test_ttt_batch_equals_one_estimate_per_plan(planned, model, with_pilot, target):
    result = planned[model]
    est = ESTIMATORS.get("ttt")
    ctx = result.context
    if with_pilot:
        ctx = attrs.evolve(ctx, pilot=_pilot(ctx.round_budget))
    items = [(c.plan, c.stats) for c in result.candidates]
    assert {c.plan.transport for c in result.candidates} == {"ota", "digital"}
    batch = est.estimate_many(ctx, iter(items), target)
    single = [est.estimate(ctx, plan, stats, target) for plan, stats in items]
    assert batch == single
    if target == 0.999:
        # never reached while training; a plan with a tail may still be drawn to an average
        # model above the predicted fc (the tails' level model), so it pays its budget
        assert all(e.rounds is None for (plan, _), e in zip(items, batch) if not plan.mix_rounds)
    if not with_pilot and target == 0.8:
        # the planner costed the candidates through the batch, at the workload's own target
        recorded = [c.cost.estimate for c in result.candidates]
        assert est.estimate_many(ctx, items, result.target_accuracy) == recorded
        assert any(e.notes for e in batch)


def test_estimators_without_a_batch_are_asked_plan_by_plan(planned):
    result = planned["mlp"]
    dsgd = ESTIMATORS.get("dsgd")
    assert not hasattr(dsgd, "estimate_many")
    items = [(c.plan, c.stats) for c in result.candidates[:20]]
    ctx = attrs.evolve(result.context, constants=dict(dsgd.priors))
    assert estimate_many(dsgd, ctx, iter(items), 0.8) == [
        dsgd.estimate(ctx, plan, stats, 0.8) for plan, stats in items]


def test_refuser_binds_the_estimators_refusal(planned):
    plans = [c.plan for c in planned["mlp"].candidates]
    paper, ttt = ESTIMATORS.get("paper"), ESTIMATORS.get("ttt")
    refuse = refuser(paper)
    # paper refuses what its own refusal does, and every plan with a mixing-only tail
    assert [refuse(p) for p in plans if not p.mix_rounds] == [
        paper.refusal(p) for p in plans if not p.mix_rounds]
    assert all("mixing-only rounds" in refuse(p) for p in plans if p.mix_rounds)
    assert any(refuse(p) for p in plans) and not all(refuse(p) for p in plans)
    assert all(refuser(ttt)(p) is None for p in plans)


@attrs.frozen
class Dropping:
    """A batch that leaves the last plan of each batch uncosted (a broken estimator)."""

    name: str = "dropping"
    description: str = "drops a plan"
    priors: dict = attrs.field(factory=dict)

    def accuracy_at(self, ctx, plan, stats, rounds):
        return 0.9

    def estimate(self, ctx, plan, stats, target_accuracy):
        from airplan_qo.plans.plan import Estimate

        return Estimate(rounds=10.0, accuracy=0.9)

    def estimate_many(self, ctx, items, target_accuracy):
        return [self.estimate(ctx, p, s, target_accuracy) for p, s in list(items)[:-1]]


def test_a_batch_short_of_its_plans_fails_the_planning_run(tmp_path):
    from airplan_qo.errors import PlanningError

    ESTIMATORS.register("dropping", Dropping())
    try:
        with aq.connect(tmp_path / "c.duckdb") as db:
            w = aq.Workload(dataset="digits", clients=12, alpha=0.5, snr_db=10)
            with pytest.raises(PlanningError, match="one estimate for each plan"):
                db.plan(w, estimator="dropping")
            assert db.catalog.query("SELECT count(*) AS n FROM airplan.planning_runs"
                                    )[0]["n"] == 0
            assert db.plan(w, estimator="ttt").planning_run_id is not None
    finally:
        ESTIMATORS._items.pop("dropping")
