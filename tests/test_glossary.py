"""docs/glossary.md names every field the EXPLAIN renderer prints, in text and in JSON."""

import json
import re
from pathlib import Path

import pytest

import airplan_qo as aq
from airplan_qo.plans.explain import GLOSSARY, render

ROOT = Path(__file__).resolve().parent.parent
#: Everything ANALYZE adds, so that its names are collected too.
ANALYZE = {"actual_rounds": 3, "actual_accuracy": 0.5, "actual_total_cost": 1.0,
           "status": "succeeded", "actual_channel_uses": 3.0, "actual_link_drop_rate": 0.1,
           "feedback": [{"metric": "rounds", "estimated": 1.0, "actual": 2.0, "censored": True}],
           "calibration": "refit", "events": ["round 3: ..."], "device": "cpu",
           "execution_time_ms": 1.0}


def glossary_names(text: str) -> set[str]:
    """The names an entry defines: the backticked names before the colon of a `- ` line."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"- ((?:`[^`]+`(?:, | / | and )?)+):", line)
        if m:
            names.update(re.findall(r"`([^`]+)`", m.group(1)))
    return names


def covered(name: str, names: set[str]) -> bool:
    """A name is covered by its own entry, or a constant ``fc.log_n`` by ``fc.*``."""
    return name in names or ("." in name and name.split(".", 1)[0] + ".*" in names)


def planned_with_pilot(db):
    """A plan with a pilot of the fully connected reference (a measured curve given by hand:
    the optimizer reads it as it reads a pilot's)."""
    from airplan_qo.planner.optimizer import Optimizer
    from airplan_qo.plans.pilot import ReferencePilot
    from airplan_qo.plans.request import PlanRequest

    curve = tuple(0.9 * (1 - 0.8 ** r) for r in range(1, 21))
    pilot = ReferencePilot(exec_id=7, rounds=20, budget=40, accuracy=curve, metric=curve,
                           n_classes=10, channel_uses=1e5, energy_j=0.5, airtime_s=0.1,
                           bits=1e7, slots=400.0)
    return Optimizer(db.catalog).plan(PlanRequest(
        workload=aq.Workload(dataset="digits", clients=20, rounds=40, model="logistic"),
        pilot=pilot))


@pytest.fixture(scope="module")
def printed() -> set[str]:
    """The field names of EXPLAIN outputs that exercise every node, estimator and footer."""
    db = aq.connect(":memory:")
    skewed = aq.Workload(dataset="digits", clients=20, alpha=0.1)
    db.analyze(skewed)
    results = [db.plan(skewed, estimator=e) for e in ("ttt", "dsgd", "paper")]
    results += [
        db.plan(aq.Workload(dataset="digits", clients=20, alpha=0.1, dropout=0.1),
                topologies=["d_cliques"], sparsity=[0.3], fallback="complete"),
        db.plan(aq.Workload(dataset="digits", clients=16), topologies=["one_peer_exponential"],
                sparsity=[0.3], fallback="complete"),
        db.plan(aq.Workload(dataset="digits", clients=16, channel="ideal"),
                topologies=["ring", "base_k(k=1)"], sparsity=[0.3, 1.0], fallback="complete"),
        # a digital pick beside an over-the-air runner-up (energy at high SNR)
        db.plan(aq.Workload(dataset="digits", clients=20, snr_db=30), topologies=["complete"],
                sparsity=[1.0], objective="energy_j", transports=["ota", "digital(bits=8)"],
                sla="accuracy >= 0.8 * fc", fallback="complete"),
        db.plan(aq.Workload(dataset="digits", clients=16, access_point=True),
                topologies=["complete"], sparsity=[1.0], algorithms=["fedavg"],
                transports=["digital(bits=8)"], fallback="complete"),
        db.plan(aq.Workload(dataset="digits", clients=16), topologies=["ring"], sparsity=[1.0],
                algorithms=["push_sum"], fallback="complete"),
        db.plan(aq.Workload(dataset="digits", clients=12), algorithms=["dllr_oa"],
                sparsity=[0.5], sla="accuracy >= 0.5", fallback="complete"),
        planned_with_pilot(db)]
    names: set[str] = set()

    def keys(doc):
        if isinstance(doc, dict):
            if "node_type" in doc:
                names.add(doc["node_type"])
            for k, v in doc.items():
                names.add(k)
                keys(v)
        elif isinstance(doc, list):
            for v in doc:
                keys(v)

    for r in results:
        for analyze in (None, ANALYZE):
            keys(json.loads(render(r, format="json", verbose=True, alternatives=3,
                                   analyze=analyze)))
            for line in render(r, verbose=True, alternatives=3, analyze=analyze).splitlines():
                names.update(re.findall(r"([A-Za-z_][A-Za-z0-9_.:]*)=", line))
                head = re.match(r"\s*(?:->\s+)?([A-Z][A-Za-z -]*?)(?::|  \(|$)", line)
                if head:
                    names.add(head.group(1).strip())
                pruned = re.search(r"pruned \(([^)]*)\)", line)
                if pruned and pruned.group(1) != "none":
                    names.update(p.split(":")[0] for p in pruned.group(1).split(", "))
    db.close()
    return names


def test_the_glossary_names_every_field_explain_prints(printed):
    names = glossary_names((ROOT / GLOSSARY).read_text(encoding="utf-8"))
    assert {"Decentralized Train", "mixing_gap", "truncation", "unlikely", "p_meets_sla",
            "Glossary", "fc.dataset:digits"} <= printed        # the collection itself works
    missing = sorted(n for n in printed if not covered(n, names))
    assert not missing, f"docs/glossary.md lacks: {', '.join(missing)}"


def test_explain_links_the_glossary_and_the_readme_does_too(printed):
    with aq.connect(":memory:") as db:
        result = db.plan(aq.Workload(dataset="digits", clients=10))
    assert f"Glossary: {GLOSSARY} explains every name above" in result.explain().splitlines()
    assert json.loads(result.explain(format="json"))[0]["glossary"] == GLOSSARY
    assert f"({GLOSSARY})" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert glossary_names("- `a`, `b`: two\n- `c` / `d`: more\n- not `e`: no\n") == \
        {"a", "b", "c", "d"}
