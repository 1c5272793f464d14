"""Mixing-only tails as a plan dimension (plans/finish.py): how many rounds a topology's tail
takes, the plan value, the planner's candidates and their estimates, SQL, the catalog row and
a trained run whose last rounds only mix."""

import math

import attrs
import pytest

import airplan_qo as aq
from airplan_qo.planner.optimizer import tail_warning
from airplan_qo.errors import AirPlanError, ValidationError
from airplan_qo.costmodels.time_to_target import FINISH_FLOOR, FINISH_FLOOR_COMPLETE, finish_gap
from airplan_qo.plans.channel_config import IDEAL_CHANNEL, ChannelConfig
from airplan_qo.plans.finish import (COMPLETE_TAIL, MIN_TAIL, REDUCTION, complete_tail_rounds,
                                     tail_rounds)
from airplan_qo.plans.plan import PhysicalPlan
from airplan_qo.plans.topology import TopologySpec
from airplan_qo.sql import parse_one
from airplan_qo.sql.binder import bind


def test_tail_rounds_follow_the_random_mixing_rate():
    # 1 - p per round: a 30-fold shrink takes ln 30 / -ln(1 - p) rounds
    assert tail_rounds(0.17, "dsgd", 100) == math.ceil(math.log(REDUCTION) / -math.log(0.83))
    # slower mixing, a longer tail, capped at a quarter of the budget
    assert tail_rounds(0.11, "dsgd", 100) > tail_rounds(0.17, "dsgd", 100)
    assert tail_rounds(0.02, "dsgd", 100) == 25 == tail_rounds(0.0, "dsgd", 100)
    # at least MIN_TAIL rounds; none where a round mixes nearly exactly (the complete graph)
    assert tail_rounds(0.8, "dsgd", 100) == MIN_TAIL
    assert tail_rounds(0.95, "dsgd", 100) == 0
    # a budget too short leaves no room; only the rules that mix the models themselves
    assert tail_rounds(0.17, "dsgd", 4 * MIN_TAIL - 1) == 0
    assert tail_rounds(0.17, "gradient_tracking", 100) == 0
    assert tail_rounds(0.17, "choco", 100) > 0


def test_the_gap_the_tail_leaves():
    ota = ChannelConfig(kind="ota", snr_db=10.0)
    # the deficit shrinks by 1 - p per round, over a noise floor that falls with the noise's
    # amplitude (sqrt(10) per 10 dB) and with faster mixing
    left = 0.2 * 0.8 ** 10
    assert finish_gap(0.2, 0.2, 10, ota, {}) == pytest.approx(left + FINISH_FLOOR / 0.2)
    assert finish_gap(0.2, 0.2, 10, ChannelConfig(kind="ota", snr_db=20.0), {}) == \
        pytest.approx(left + FINISH_FLOOR / 0.2 / math.sqrt(10))
    assert finish_gap(0.2, 0.2, 10, ChannelConfig(kind="ota", snr_db=0.0), {}) == \
        pytest.approx(left + FINISH_FLOOR / 0.2 * math.sqrt(10))
    assert finish_gap(0.2, 0.4, 0, ota, {}) < finish_gap(0.2, 0.2, 0, ota, {})
    assert finish_gap(0.2, 0.2, 10, IDEAL_CHANNEL, {}) == pytest.approx(left)
    # a calibration may set the floor; a negative predicted deficit counts as none
    assert finish_gap(-0.1, 0.2, 10, ota, {"finish.floor": 0.004}) == pytest.approx(0.02)


def test_a_plan_with_a_tail_names_it_and_refuses_rules_that_cannot_mix():
    spec = TopologySpec.create("ring", 10)
    plan = PhysicalPlan(spec, mix_rounds=5)
    assert plan.label().endswith(" mix=5") and PhysicalPlan(spec).label() == "ring " \
        "[metropolis_hastings] k=1"
    with pytest.raises(ValidationError, match="gradient_tracking cannot run mixing-only"):
        PhysicalPlan(spec, algorithm="gradient_tracking", transport="digital", mix_rounds=5)
    with pytest.raises(ValidationError, match="mix_rounds must be a non-negative integer"):
        PhysicalPlan(spec, mix_rounds=-1)



def test_a_tail_on_the_complete_graph_is_a_short_plain_average():
    spec = TopologySpec.create("ring", 10)
    plan = PhysicalPlan(spec, mix_rounds=2, mix_on="Complete")
    assert plan.mix_on == "complete" and plan.label().endswith(" mix=2 on complete")
    assert PhysicalPlan(spec, mix_rounds=2).mix_on is None
    with pytest.raises(ValidationError, match="mix_on must be one of complete"):
        PhysicalPlan(spec, mix_rounds=2, mix_on="ring")
    with pytest.raises(ValidationError, match="the plan has none"):
        PhysicalPlan(spec, mix_on="complete")
    with pytest.raises(ValidationError, match="only dsgd runs its mixing-only rounds on the "
                                              "complete graph, not choco"):
        PhysicalPlan(spec, k_ratio=0.5, mix_rounds=2, mix_on="complete")
    with pytest.raises(ValidationError, match="is the complete graph already"):
        PhysicalPlan(TopologySpec.create("complete", 10), mix_rounds=2, mix_on="complete")
    # two rounds, for D-SGD on any topology but the complete graph, within a quarter budget
    assert complete_tail_rounds("ring", "dsgd", 100) == COMPLETE_TAIL == 2
    assert complete_tail_rounds("complete", "dsgd", 100) == 0
    assert complete_tail_rounds("ring", "choco", 100) == 0
    assert complete_tail_rounds("ring", "push_sum", 100) == 0
    assert complete_tail_rounds("ring", "dsgd", 4 * COMPLETE_TAIL - 1) == 0
    # what it leaves: the floor of one noisy exact average, whatever the deficit and p
    ota = ChannelConfig(kind="ota", snr_db=10.0)
    assert finish_gap(0.2, 0.1, 2, ota, {}, "complete") == pytest.approx(FINISH_FLOOR_COMPLETE)
    assert finish_gap(0.0, 0.5, 2, ChannelConfig(kind="ota", snr_db=20.0), {}, "complete") \
        == pytest.approx(FINISH_FLOOR_COMPLETE / math.sqrt(10))
    assert finish_gap(0.2, 0.1, 2, IDEAL_CHANNEL, {}, "complete") == 0.0
    assert finish_gap(0.2, 0.1, 2, ota, {"finish.floor_complete": 0.01}, "complete") == 0.01


W = aq.Workload.from_params("mnist1d", 80, {"alpha": 1.0, "rounds": 200, "snr_db": 10,
                                            "local_steps": 5})


def _plan(db, **kw):
    return db.plan(W, topologies=["complete", "one_peer_exponential"], sparsity=[1.0],
                   transports=["ota"], algorithms=["auto"], fallback="complete", **kw)


def test_the_planner_costs_tails_from_the_average_model_fit(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        plain = _plan(db, mix_rounds="off")
        assert not any(c.plan.mix_rounds for c in plain.candidates)
        tailed = _plan(db, mix_rounds="auto")
        # 'auto' is the default with ttt
        assert [c.plan for c in _plan(db).candidates] == [c.plan for c in tailed.candidates]
        assert not any(c.plan.mix_rounds for c in _plan(db, estimator="dsgd").candidates)
        by = {c.plan.label(): c for c in tailed.candidates}
        peer = by["one_peer_exponential [prescribed] k=1"].cost
        mix = next(c.plan.mix_rounds for c in tailed.candidates
                   if c.plan.topology.family == "one_peer_exponential" and c.plan.mix_rounds
                   and c.plan.mix_on is None)
        label = f"one_peer_exponential [prescribed] k=1 mix={mix}"
        tail = by[label].cost
        # the complete graph averages in a round: no tail planned for it
        assert not any(c.plan.mix_rounds and c.plan.topology.family == "complete"
                       for c in tailed.candidates)
        t = tail.estimate.terms
        # trained alone the one-peer graph's clients rarely reach the target; its average
        # model, after the shorter training an own tail leaves, is planned to reach it plus the
        # 10 dB gap as rarely (measured at N = 80, 5 local steps, 200 rounds: the one-peer
        # graph's average model ended at 0.94-0.97 of fc, docs/results.md)
        assert peer.estimate.p_meets < 0.5 and t["p_meets_average_model"] < 0.5
        assert tail.estimate.p_meets == max(t["p_meets_training"], t["p_meets_average_model"])
        assert t["training_rounds"] == 200 - mix and mix == tail_rounds(
            t["p_random"], "dsgd", 200)
        assert t["finish_gap"] == pytest.approx(finish_gap(
            t["finish_deficit"], t["p_random"], mix, tail_plan_channel(tailed), {}))
        # the same per-round cost: the tail's rounds are paid like any other
        assert tail.per_round.channel_uses == peer.per_round.channel_uses
        assert tail.estimate.rounds <= 200
        # recorded with its tail
        row = db.sql(f"SELECT mix_rounds FROM airplan.plans WHERE plan_id = "
                     f"{by[label].plan_id}")
        assert list(row[0].rows) == [(mix,)]
        # the same plan with a tail on the complete graph: two rounds, which cost what a
        # round of the complete graph costs where the clients have not reached the target
        # training; it leaves one exact average's floor
        on_label = f"one_peer_exponential [prescribed] k=1 mix={COMPLETE_TAIL} on complete"
        on, full = by[on_label].cost, by["complete [metropolis_hastings] k=1"].cost
        u = on.estimate.terms
        assert u["training_rounds"] == 200 - COMPLETE_TAIL
        # the longer training and the smaller gap make the target likely
        assert u["p_meets_average_model"] > 0.5 > t["p_meets_average_model"]
        assert u["finish_gap"] == pytest.approx(FINISH_FLOOR_COMPLETE)
        assert u["finish_gap"] < t["finish_gap"]
        paid = u["tail_rounds_paid"]
        assert paid == pytest.approx((1 - u["p_meets_training"]) * COMPLETE_TAIL) and paid > 1
        assert on.per_round == peer.per_round and on.tail == full.per_round
        assert on.total("channel_uses") == pytest.approx(
            peer.per_round.channel_uses * (on.rounds - paid) + full.per_round.channel_uses
            * paid + on.startup)
        assert on.breakdown()["tail_rounds"] == pytest.approx(paid)
        assert tail.tail is None
        # only D-SGD gets one, never the complete graph itself
        assert all(c.plan.effective_algorithm == "dsgd" and c.plan.topology.family != "complete"
                   for c in tailed.candidates if c.plan.mix_on)
        row = db.sql(f"SELECT mix_rounds, mix_on FROM airplan.plans WHERE plan_id = "
                     f"{by[on_label].plan_id}")
        assert list(row[0].rows) == [(COMPLETE_TAIL, "complete")]
        # a fixed number of rounds: every plan with that tail (the complete graph too), on
        # its own topology
        fixed = _plan(db, mix_rounds=10)
        assert {c.plan.mix_rounds for c in fixed.candidates} == {10}
        assert not any(c.plan.mix_on for c in fixed.candidates)


def tail_plan_channel(result):
    return result.candidates[0].plan.channel


def test_estimators_without_a_tail_model_refuse_it(tmp_path):
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(ValidationError, match="estimator dsgd does not model mixing-only"):
            _plan(db, mix_rounds="auto", estimator="dsgd")
    with aq.connect(tmp_path / "c.duckdb") as db:
        with pytest.raises(ValidationError, match="mix_rounds = 200 leaves no training round"):
            _plan(db, mix_rounds=200)
    with pytest.raises(ValidationError, match="mix_rounds must be 'auto', 'off' or a non-neg"):
        aq.plans.request.check_mix_rounds("sometimes")


def test_sql_with_mix_rounds():
    bound = bind(parse_one("EXPLAIN TRAIN mnist1d ON 20 CLIENTS WITH (mix_rounds = 'auto')"))
    assert bound.mix_rounds == "auto" and bound.plan_options() == {"mix_rounds": "auto"}
    assert bind(parse_one("TRAIN mnist1d ON 20 CLIENTS WITH (mix_rounds = 12)")).mix_rounds == 12
    # without the option: the planner's default ('auto' with ttt)
    assert bind(parse_one("TRAIN mnist1d ON 20 CLIENTS")).plan_options() == {"mix_rounds": None}
    with pytest.raises(AirPlanError, match="mix_rounds must be") as err:
        bind(parse_one("TRAIN mnist1d ON 20 CLIENTS WITH (mix_rounds = 'x')"))
    assert "column" in str(err.value)
    with pytest.raises(AirPlanError, match="COST MODEL dsgd does not model mixing-only"):
        bind(parse_one("TRAIN mnist1d ON 20 CLIENTS WITH (mix_rounds = 'auto') COST MODEL dsgd"))


def test_an_execution_runs_the_tail_and_records_it(tmp_path):
    from airplan_qo.runtime.execution import execute

    w = aq.Workload.from_params("digits", 10, {"rounds": 12, "snr_db": 20})
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(w, topologies=["ring"], sparsity=[1.0], transports=["ota"],
                         algorithms=["dsgd"], mix_rounds=4, fallback="complete")
        tail = next(c for c in result.candidates if c.plan.mix_rounds == 4)
        report = execute(db.catalog, attrs.evolve(result, chosen=tail), quiet=True,
                         stop_at_target=False)
        assert report.result.rounds == 12
        rows = db.sql(f"SELECT round, train_loss FROM airplan.round_stats WHERE exec_id = "
                      f"{report.exec_id} ORDER BY round")[0].rows
        assert [loss is None for _, loss in rows] == [False] * 8 + [True] * 4
        assert "mix=4" in result.explain()


def test_an_execution_mixes_its_tail_on_the_complete_graph(tmp_path):
    from airplan_qo.runtime.execution import execute

    w = aq.Workload.from_params("digits", 10, {"rounds": 12, "snr_db": 20})
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(w, topologies=["ring", "complete"], sparsity=[1.0], transports=["ota"],
                         algorithms=["dsgd"], mix_rounds="auto", fallback="complete")
        tail = next(c for c in result.candidates if c.plan.mix_on == "complete")
        full = next(c for c in result.candidates if c.plan.topology.family == "complete")
        report = execute(db.catalog, attrs.evolve(result, chosen=tail), quiet=True,
                         stop_at_target=False)
        rows = db.sql(f"SELECT round, train_loss, channel_uses FROM airplan.round_stats "
                      f"WHERE exec_id = {report.exec_id} ORDER BY round")[0].rows
        assert [loss is None for _, loss, _ in rows] == [False] * 10 + [True] * 2
        # the ring's rounds cost the ring's, the tail's the complete graph's
        uses = [u for _, _, u in rows]
        assert uses[:10] == pytest.approx([tail.cost.per_round.channel_uses] * 10, rel=0.01)
        assert uses[10:] == pytest.approx([full.cost.per_round.channel_uses] * 2, rel=0.01)
        assert min(uses[10:]) > 2 * max(uses[:10])
        text = attrs.evolve(result, chosen=tail).explain()
        assert "on the complete graph" in text and "tail_per_round_channel_uses" in text
        # a chosen plan with a tail far below fc is planned without a warning on its P; within
        # 4% of fc, where the level model was measured overconfident, with one
        tailed = db.plan(w, topologies=["ring"], sparsity=[1.0], transports=["ota"],
                         algorithms=["dsgd"], mix_rounds=4, sla="accuracy >= 0.3 * fc")
        assert tailed.chosen.plan.mix_rounds == 4
        assert not any("mixing-only rounds" in x for x in tailed.warnings)
        assert tail_warning(tailed.chosen.plan, 0.3, 1.0) is None
        assert "measured overconfident" in tail_warning(tailed.chosen.plan, 0.97, 1.0)
        assert tail_warning(full.plan, 0.97, 1.0) is None
        # the estimate-vs-actual row prices the tail's rounds at the complete graph's cost
        fb = db.sql(f"SELECT estimated, actual FROM airplan.feedback WHERE exec_id = "
                    f"{report.exec_id} AND metric = 'channel_uses'")[0].rows
        assert fb[0][0] == pytest.approx(10 * tail.cost.per_round.channel_uses
                                         + 2 * tail.cost.tail.channel_uses)
        assert fb[0][0] == pytest.approx(fb[0][1], rel=0.05)


@pytest.mark.parametrize("reoptimize", [False, True])
def test_an_execution_interrupted_in_its_tail_on_the_complete_graph_resumes(tmp_path,
                                                                            monkeypatch,
                                                                            reoptimize):
    import os
    import signal

    from airplan_qo.runtime import execution
    from airplan_qo.runtime.engine import Trainer

    monkeypatch.setattr(execution, "CHECKPOINT_EVERY", 4)
    w = aq.Workload.from_params("digits", 10, {"rounds": 12, "snr_db": 20})

    def run(db, interrupt_at=None):
        result = db.plan(w, topologies=["ring"], sparsity=[1.0], transports=["ota"],
                         algorithms=["dsgd"], mix_rounds="auto", fallback="complete")
        tail = next(c for c in result.candidates if c.plan.mix_on == "complete")
        if interrupt_at is None:
            return execute(db.catalog, attrs.evolve(result, chosen=tail), quiet=True,
                           stop_at_target=False, reoptimize=reoptimize)
        original = Trainer.step

        def step(self, train=True):
            row = original(self, train)
            if self.round == interrupt_at:
                os.kill(os.getpid(), signal.SIGINT)
            return row

        with monkeypatch.context() as m:
            m.setattr(Trainer, "step", step)
            return execute(db.catalog, attrs.evolve(result, chosen=tail), quiet=True,
                           stop_at_target=False, reoptimize=reoptimize)

    from airplan_qo.runtime.execution import execute

    curve = "SELECT round, test_accuracy, channel_uses FROM airplan.round_stats WHERE " \
            "exec_id = ? ORDER BY round"
    with aq.connect(tmp_path / "a.duckdb") as db:
        full = run(db)
        full_curve = db.catalog.query(curve, [full.exec_id])
    with aq.connect(tmp_path / "b.duckdb") as db:
        cut = run(db, interrupt_at=11)          # the tail's first round on the complete graph
        assert cut.result.status == "aborted"
        again = db.resume(cut.exec_id)
        assert again.result.status == "succeeded"
        assert db.catalog.query(curve, [cut.exec_id]) == full_curve
        assert again.result.final_accuracy == full.result.final_accuracy


def test_a_tail_on_the_complete_graph_costs_its_own_transports_round():
    with aq.connect(":memory:") as db:
        w = aq.Workload.from_params("mnist1d", 30, {"alpha": 1.0, "rounds": 100})
        result = db.plan(w, topologies=["complete", "one_peer_exponential"], sparsity=[1.0],
                         transports=["ota", "digital(bits=8)"], algorithms=["dsgd"],
                         mix_rounds="auto", fallback="complete")
        full = {c.plan.transport: c.cost.per_round for c in result.candidates
                if c.plan.topology.family == "complete"}
        tails = [c for c in result.candidates if c.plan.mix_on]
        assert {c.plan.transport for c in tails} == {"ota", "digital"}
        for c in tails:      # over the air a round of the complete graph, digital its 8-bit one
            assert c.cost.tail == full[c.plan.transport] != c.cost.per_round
