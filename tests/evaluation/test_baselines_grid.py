"""Grids that name transports and algorithms (the paper's baselines as plans): parsing with
errors that name the bad key and value, planning and training them, and the report's baselines
as fixed policies. A grid that names none plans as before (over the air, the default rule)."""

import pytest

import airplan_qo as aq
from airplan_qo.errors import ValidationError
from airplan_qo.evaluation import load_grid, parse_grid, run_evaluation
from airplan_qo.evaluation.baselines import baseline_name, fitted, paper_row
from airplan_qo.evaluation.runner import cache_key, measure, plan_seed
from airplan_qo.plans.plan import ChannelConfig, PhysicalPlan
from airplan_qo.plans.topology import TopologySpec

OPS = """
seeds = 1
[defaults]
clients = 6
local_steps = 1
access_point = true
topologies = ["ring", "complete"]
sparsity = [1.0]
transports = ["ota", "digital(bits=8)"]
algorithms = ["auto", "gradient_tracking", "fedavg"]
[[workloads]]
snr_db = [0, 10]
"""


def test_transports_and_algorithms_parse_and_do_not_expand_workloads():
    grid = parse_grid(OPS, source="ops.toml")
    assert len(grid.workloads) == 2                      # snr expands; the operator lists don't
    ws = grid.workloads[0]
    assert ws.transports == ("ota", "digital(bits=8)")
    assert ws.algorithms == ("auto", "gradient_tracking", "fedavg")
    assert ws.workload.access_point is True
    assert ws.operator_pairs() == [("ota", 32), ("digital", 8)]
    # ring: auto x2, GT digital (over the air excluded); complete: the same + fedavg x2
    assert ws.n_plans() == 3 + 5
    assert grid.n_runs == 2 * 8                          # the fc reference is a candidate
    assert ws.describe()["transports"] == ["ota", "digital(bits=8)"]
    # a bare "digital" is both default widths
    bare = parse_grid(OPS.replace('"digital(bits=8)"', '"digital"'))
    assert bare.workloads[0].operator_pairs() == [("ota", 32), ("digital", 8), ("digital", 32)]


def test_a_grid_without_operators_plans_as_before():
    grid = load_grid("quick")
    for ws in grid.workloads:
        assert ws.transports == () and ws.algorithms == ()
        assert ws.plan_transports() == ("ota",) and ws.plan_algorithms() == ("auto",)
        assert "transports" not in ws.describe() and "algorithms" not in ws.describe()
        assert ws.n_plans() == len(ws.specs()) * len(ws.sparsity)
    assert grid.n_runs == 48
    with aq.connect(":memory:") as db:
        sp = plan_seed(db, grid, grid.workloads[0], 0)
    labels = [c.plan.label() for c in sp.candidates]
    assert len(labels) == 8                              # 4 topologies x 2 k, nothing else
    assert all(c.plan.transport == "ota" and c.plan.algorithm == "auto" for c in sp.candidates)


def test_cache_keys_of_over_the_air_runs_are_those_cached_before_the_access_point():
    # the key of this run before the access_point parameter existed (runner.cache_key then):
    # evaluations cached since keep being reused
    w = aq.Workload(dataset="digits", clients=10, rounds=5)
    plan = PhysicalPlan(TopologySpec.create("ring", 10), 1.0, ChannelConfig())
    assert cache_key(w, plan, 5) == (
        "24227b7d8e02945b2aaaf5a838cd89f884c7120b144dd24003d9e7eb421961be")
    import attrs

    assert cache_key(attrs.evolve(w, access_point=True), plan, 5) != cache_key(w, plan, 5)
    for other in (attrs.evolve(plan, algorithm="push_sum"),
                  attrs.evolve(plan, algorithm="matcha"),
                  attrs.evolve(plan, transport="digital", bits=8),
                  attrs.evolve(plan, transport="digital", bits=32)):
        assert cache_key(w, other, 5) != cache_key(w, plan, 5)


@pytest.mark.parametrize("snippet, key, words", [
    ('transports = ["ota", "analog"]', "workloads[0].transports", "analog"),
    ('transports = ["digital(bits=64)"]', "workloads[0].transports", "bits must be"),
    ('transports = ["ota(bits=8)"]', "workloads[0].transports", "digital transport only"),
    ('transports = "ota"', "workloads[0].transports", "non-empty list"),
    ('transports = []', "workloads[0].transports", "non-empty list"),
    ('transports = [8]', "workloads[0].transports", "got 8"),
    ('algorithms = ["fedsgd"]', "workloads[0].algorithms", "fedsgd"),
    ('algorithms = []', "workloads[0].algorithms", "non-empty list"),
    ('algorithms = ["fedavg"]', "workloads[0].algorithms", "access point"),
    ('algorithms = ["gradient_tracking"]', "workloads[0].algorithms", "over the air"),
    ('access_point = "maybe"', "workloads[0].access_point", "must be bool"),
])
def test_operator_key_errors_name_the_key_and_the_value(snippet, key, words):
    text = f"""
[[workloads]]
clients = 6
local_steps = 1
topologies = ["ring"]
sparsity = [1.0]
{snippet}
"""
    with pytest.raises(ValidationError) as err:
        parse_grid(text, source="bad.toml")
    msg = str(err.value)
    assert "bad.toml" in msg and f"'{key}'" in msg and words in msg


def test_fedavg_needs_the_complete_graph_in_the_space():
    text = """
[[workloads]]
clients = 6
access_point = true
topologies = ["ring"]
sparsity = [1.0]
algorithms = ["auto", "fedavg"]
"""
    with pytest.raises(ValidationError, match="workloads\\[0\\].algorithms.*complete graph"):
        parse_grid(text)
    # every reason is given: gradient tracking with several local steps has no transport left
    gt = text.replace('"fedavg"', '"gradient_tracking"').replace('sparsity', 'local_steps = 5\n'
                                                                              'sparsity')
    with pytest.raises(ValidationError) as err:
        parse_grid(gt.replace('algorithms', 'transports = ["ota", "digital(bits=8)"]\n'
                                            'algorithms'))
    assert "over the air" in str(err.value) and "one gradient per round" in str(err.value)


TINY = """
seeds = 1
estimator = "ttt"
scalability_clients = [6]
[[workloads]]
clients = 6
rounds = 3
local_steps = 1
access_point = true
snr_db = 10
topologies = ["ring", "complete"]
sparsity = [1.0]
transports = ["ota", "digital(bits=8)"]
algorithms = ["auto", "gradient_tracking", "push_sum", "fedavg"]
"""


def test_a_grid_with_operators_plans_trains_and_reports_them_as_fixed_policies(tmp_path):
    grid = parse_grid(TINY, source="tiny.toml")
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        measured = measure(db, grid)
        runs = measured[0].runs
        labels = {r.plan for r in runs}
        assert len(runs) == grid.n_runs == len(labels)
        assert all(r.status == "succeeded" for r in runs)
        plans = {lb: measured[0].candidate(0, lb)[1].plan for lb in labels}
        got = {(p.topology.family, p.effective_algorithm, p.transport) for p in plans.values()}
        assert got == {
            ("ring", "dsgd", "ota"), ("ring", "dsgd", "digital"),
            ("ring", "gradient_tracking", "digital"), ("ring", "push_sum", "ota"),
            ("complete", "dsgd", "ota"), ("complete", "dsgd", "digital"),
            ("complete", "gradient_tracking", "digital"), ("complete", "push_sum", "ota"),
            ("complete", "fedavg", "ota"), ("complete", "fedavg", "digital")}
        # digital runs are costed by their packets: far more channel uses than over the air
        by = {(p.topology.family, p.effective_algorithm, p.transport): lb
              for lb, p in plans.items()}
        uses = {r.plan: sum(r.channel_uses) for r in runs}
        assert uses[by[("ring", "dsgd", "digital")]] > uses[by[("ring", "dsgd", "ota")]]
        rep = run_evaluation(db, grid, out_dir=tmp_path / "o", figures=False)
    assert rep.summary["trained"] == 0                   # every run was cached by measure
    block = rep.summary["baselines"]
    rows = block["per_workload"][grid.workloads[0].key]
    assert {r["plan"] for r in rows} == labels
    assert {p["policy"] for p in block["policies"]} == labels
    assert block["advisor"]["workloads"] == 1 and block["advisor"]["estimator"] == "ttt"
    # the plans whose operators lie outside the shipped ttt fit are said so (the shipped fit
    # saw every transport and algorithm of this grid; a range without them sees only D-SGD and
    # CHOCO over the air)
    from airplan_qo.costmodels.time_to_target import load_reference, operator_fitted

    fitted = load_reference()["range"]
    assert set(block["unseen"]) == {lb for lb, p in plans.items()
                                    if not operator_fitted(fitted, p)}
    assert not operator_fitted({}, plans[next(lb for lb, p in plans.items()
                                              if p.transport == "digital")])
    text = rep.report_path.read_text()
    section = text.split("## The paper's baselines as fixed policies", 1)[1].split("\n## ", 1)[0]
    assert "GT-DSGD (ring), digital, 8 bits" in section
    assert "FedAvg via the access point, over the air" in section
    assert "FedAvg via the access point, digital, 8 bits" in section
    assert "push-sum (SGP) (complete), over the air" in section
    assert "**advisor** (`ttt`)" in section and "widened" in section
    for lb in labels:
        assert f"`{lb}`" in section
    # the measured over-the-air / digital map reads the same summary
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_transport_crossover.py"),
                          "--measured", str(rep.summary_path)], capture_output=True, text=True,
                         check=True, cwd=root, env=env).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("| 6 | 10 |")]
    assert [ln.split(" | ")[2] for ln in lines] == ["N-1", "2"]   # complete graph, ring
    row = {(r["family"], r["transport"]): r for r in rows if r["algorithm"] == "dsgd"}
    ratio = (row[("ring", "digital")]["channel_uses"]["mean"]
             / row[("ring", "ota")]["channel_uses"]["mean"])
    assert f"| 6 | 10 | 2 | 8 | {ratio:.3g} |" in out


def test_a_grid_without_operators_has_no_baselines_section(tmp_path):
    grid = parse_grid(TINY.split("transports")[0].replace("access_point = true\n", ""))
    with aq.connect(str(tmp_path / "c.duckdb")) as db:
        rep = run_evaluation(db, grid, out_dir=tmp_path / "o", figures=False)
    assert "baselines" not in rep.summary
    assert "## The paper's baselines" not in rep.report_path.read_text()


def test_baseline_names_and_the_papers_rows():
    sw = TopologySpec.create("small_world", 20, k=4)
    fc = TopologySpec.create("complete", 20)
    ch = ChannelConfig()
    dig = PhysicalPlan(sw, 1.0, ch, transport="digital", bits=8)
    assert baseline_name(dig) == "D-SGD (SW), digital, 8 bits"
    assert paper_row(dig)[0] == "Digital D-SGD (SW)" and not fitted(dig, {})  # over the air only
    ota = PhysicalPlan(sw, 1.0, ch)
    assert fitted(ota) and paper_row(ota)[0].startswith("fixed small world")
    fed = PhysicalPlan(fc, 1.0, ch, algorithm="fedavg")
    assert baseline_name(fed) == "FedAvg via the access point, over the air"
    assert paper_row(fed)[0] == "FedAvg (server)"
    assert paper_row(PhysicalPlan(fc, 1.0, ch)) is None
