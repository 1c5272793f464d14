"""The pruning rules: each names why a candidate is pruned, and the first rule of the table
that does wins."""

import attrs
import pytest

import airplan_qo as aq
from airplan_qo.errors import ValidationError
from airplan_qo.planner import pruning
from airplan_qo.planner.pruning import Pruning, budget_limits, pruned_reason

W = aq.Workload(dataset="digits", clients=20, alpha=0.5, snr_db=10)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    with aq.connect(tmp_path_factory.mktemp("pruning") / "cat.duckdb") as db:
        yield db.plan(W, topologies=["complete", "ring"], weights=["metropolis_hastings"],
                      sparsity=[0.1, 1.0])


def _facts(result, **request_changes) -> Pruning:
    request = attrs.evolve(result.request, **request_changes)
    budgets = budget_limits(request)
    return Pruning(request, result.fc_accuracy, budgets, result.context.round_budget)


def test_the_chosen_plan_passes_every_rule_again(planned):
    assert not planned.fallback
    assert pruned_reason(planned.chosen, _facts(planned)) is None


def test_each_rule_names_its_reason(planned):
    c = planned.chosen
    unlikely = [x for x in planned.candidates if (x.pruned_reason or "").startswith("unlikely")]
    assert unlikely and all(pruning.chance(x, _facts(planned)) == x.pruned_reason
                            for x in unlikely)
    assert pruning.chance(c, _facts(planned)) is None
    assert pruning.no_statistics(c, attrs.evolve(_facts(planned), unanalysed=(
        c.plan.topology,))).startswith("statistics:")
    assert pruning.connectivity(c, _facts(planned, exclude_topologies=(
        c.plan.topology,))) == "connectivity: the topology being replaced"
    ring = next(x for x in planned.candidates if x.plan.topology.family == "ring")
    assert pruning.connectivity(ring, _facts(planned, min_mixing_p=1.0)).startswith(
        "connectivity: mixing p")
    complete = next(x for x in planned.candidates if x.plan.topology.family == "complete")
    assert pruning.connectivity(complete, _facts(planned, min_mixing_p=1.0)) is None
    assert pruning.budgets(c, _facts(planned, budgets=(("seconds", 1e-12),))).startswith(
        "budget: airtime")
    assert pruning.budgets(c, _facts(planned, budgets=(("joules", 1e-12),))).startswith(
        "budget: energy")


def test_the_first_rule_that_prunes_wins(planned):
    c = planned.chosen
    both = _facts(planned, exclude_topologies=(c.plan.topology,), budgets=(("seconds", 1e-12),))
    assert pruned_reason(c, both) == "connectivity: the topology being replaced"
    assert pruning.RULES.index(pruning.connectivity) < pruning.RULES.index(pruning.budgets)
    budget_only = _facts(planned, budgets=(("seconds", 1e-12),))
    assert pruned_reason(c, budget_only).startswith("budget: airtime")


def test_budgets_are_checked_by_name_and_sign(planned):
    with pytest.raises(ValidationError, match="unknown budget 'hours'"):
        budget_limits(attrs.evolve(planned.request, budgets=(("hours", 1.0),)))
    with pytest.raises(ValidationError, match="budget joules must be positive"):
        budget_limits(attrs.evolve(planned.request, budgets=(("joules", 0.0),)))
