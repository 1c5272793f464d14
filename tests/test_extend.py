"""Your own model, data and graph through the public API (docs/data.md, Your own model and data).
"""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch import nn

import airplan_qo as aq
from airplan_qo.data.datasets import DATASETS
from airplan_qo.model_size import MODELS, parameter_count


@pytest.fixture
def forget():
    """Names registered by a test are removed again afterwards (registries are per process)."""
    names: list[tuple[object, str]] = []
    yield names
    for registry, name in names:
        registry._items.pop(name, None)


class Residual(nn.Module):
    """Not a Sequential: trained client by client (the 'loop' strategy)."""

    def __init__(self, n_in: int, n_classes: int, width: int = 12):
        super().__init__()
        self.inp = nn.Linear(n_in, width)
        self.mid = nn.Linear(width, width)
        self.out = nn.Linear(width, n_classes)

    def forward(self, x):
        h = torch.relu(self.inp(x.flatten(1)))
        return self.out(h + torch.relu(self.mid(h)))


def test_a_registered_module_trains_from_sql_with_its_own_d(tmp_path, forget):
    aq.register_model("mine", lambda shape, n_classes: Residual(int(np.prod(shape)), n_classes))
    forget.append((MODELS, "mine"))
    d = sum(p.numel() for p in Residual(64, 10).parameters())
    assert parameter_count("mine", (1, 8, 8), 10) == d == 64 * 12 + 12 + 12 * 12 + 12 + 130
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("EXPLAIN ANALYZE TRAIN digits ON 4 CLIENTS WITH (model = 'mine', "
                     "rounds = 2) USING TOPOLOGY ring USING SPARSITY 1 SLA accuracy >= 0.1")
        assert r.status == "succeeded" and r.rounds == 2
        assert f"model=mine d={d} " in r.text
        [q] = db.sql("SELECT count(*) FROM airplan.round_stats")
        assert q.fetchall() == [(2,)]


def test_registered_data_and_a_zero_argument_factory(tmp_path, forget):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0)
    aq.register_dataset("quadrants", (x[:240], y[:240], x[240:], y[240:]))
    aq.register_model("tiny", lambda: nn.Sequential(nn.Linear(6, 4)))
    forget += [(DATASETS, "quadrants"), (MODELS, "tiny")]
    with aq.connect(tmp_path / "c.duckdb") as db:
        [r] = db.sql("EXPLAIN ANALYZE TRAIN quadrants ON 4 CLIENTS WITH (model = tiny, "
                     "rounds = 3, partition = 'iid') USING TOPOLOGY complete FALLBACK COMPLETE")
    assert r.status == "succeeded" and "model=tiny d=28 " in r.text
    assert r.accuracy > 0.5        # four linearly separable quadrants


def test_a_loader_gets_the_workload_seed(forget):
    seen = []

    def loader(seed, scale=1.0):
        seen.append(seed)
        x = np.full((20, 3), scale, dtype=np.float32)
        return aq.Dataset.from_arrays("ld", x, np.arange(20) % 2, x[:4], np.arange(4) % 2)

    aq.register_dataset("ld", loader)
    forget.append((DATASETS, "ld"))
    from airplan_qo.data import load

    assert load("ld", seed=7, scale=2.0).x_train[0, 0] == 2.0 and seen == [7]
    with pytest.raises(aq.ValidationError, match="has no option 'other'"):
        load("ld", other=1)


def test_registration_errors_name_the_problem(forget):
    with pytest.raises(aq.ValidationError, match="built-in model"):
        aq.register_model("mlp", lambda s, n: nn.Linear(1, 1))
    with pytest.raises(aq.ValidationError, match="built-in dataset"):
        aq.register_dataset("digits", (np.zeros((2, 1)), [0, 1], np.zeros((2, 1)), [0, 1]))
    with pytest.raises(aq.ValidationError, match="must be callable"):
        aq.register_model("notfn", 3)
    aq.register_model("notmodule", lambda s, n: "a string")
    aq.register_model("buffered", lambda s, n: nn.Sequential(nn.Flatten(), nn.BatchNorm1d(64),
                                                             nn.Linear(64, n)))
    forget += [(MODELS, "notmodule"), (MODELS, "buffered")]
    with pytest.raises(aq.ValidationError, match="not a torch.nn.Module"):
        parameter_count("notmodule", (1, 8, 8), 10)
    with pytest.raises(aq.ValidationError, match="already registered"):
        aq.register_model("buffered", lambda s, n: nn.Linear(1, 1))
    from airplan_qo.model_size import build_model

    with pytest.raises(aq.ValidationError, match="has buffers"):
        build_model("buffered", (1, 8, 8), 10)
    with pytest.raises(aq.ValidationError) as err:
        aq.Workload(model="mien")
    assert "cnn1d" in str(err.value) and "buffered" in str(err.value) \
        and "register_model" in str(err.value)
    with pytest.raises(aq.UnknownNameError, match="register_dataset"):
        aq.Workload(dataset="nope")


def test_a_networkx_graph_is_planned_as_from_edges(tmp_path):
    g = nx.circulant_graph(12, [1, 3])
    with aq.connect(tmp_path / "c.duckdb") as db:
        result = db.plan(aq.Workload(dataset="digits", clients=12), topologies=[g])
        spec = result.chosen.plan.topology
        assert spec.family == "from_edges"
        text = result.explain()
        assert "family=from_edges" in text and "edges=24" in text
        # a scipy adjacency matrix too, and one graph instead of a list
        adjacency = sp.csr_array(nx.to_scipy_sparse_array(g))
        other = db.plan(aq.Workload(dataset="digits", clients=12), topologies=adjacency)
        assert other.chosen.plan.topology.family == "from_edges"
        with pytest.raises(aq.ValidationError, match="networkx.Graph"):
            db.plan(aq.Workload(dataset="digits", clients=12), topologies=[[(0, 1), (1, 2)]])
        with pytest.raises(aq.ValidationError, match="directed graph"):
            db.plan(aq.Workload(dataset="digits", clients=12), topologies=[nx.DiGraph(g)])
