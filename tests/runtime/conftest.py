"""Shared fixtures for the runtime tests: the digits dataset, partitions and small topologies."""

import pytest

from airplan_qo.data import load, partition
from airplan_qo.plans.topology import TopologySpec, build


@pytest.fixture(scope="session")
def digits():
    return load("digits", seed=0)


@pytest.fixture(scope="session")
def digits_iid(digits):
    return partition("iid", digits.y_train, 10, seed=0)


@pytest.fixture(scope="session")
def digits_skewed(digits):
    return partition("dirichlet", digits.y_train, 10, seed=0, alpha=0.5)


@pytest.fixture(scope="session")
def ring10():
    return build(TopologySpec.create("ring", 10))


@pytest.fixture(scope="session")
def complete10():
    return build(TopologySpec.create("complete", 10))
