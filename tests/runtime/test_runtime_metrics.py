"""Metrics: consensus distance identities, Jain's index, divergence detection."""

import itertools
import math

import numpy as np
import pytest
import torch

from airplan_qo.runtime import metrics
from airplan_qo.runtime.metrics import (
    centred_row_norms,
    consensus_distance,
    consensus_sq_distance,
    diverged,
    jain_index,
    mean_pairwise_distance,
    row_sum,
    sq_distance_of_norms,
)


def test_consensus_distance_equals_the_brute_force_rms_pairwise_distance():
    x = torch.randn(9, 13, dtype=torch.float64)
    pairs = [float((x[i] - x[j]).norm() ** 2) for i, j in itertools.permutations(range(9), 2)]
    assert consensus_sq_distance(x) == pytest.approx(np.mean(pairs), rel=1e-10)
    assert consensus_distance(x) == pytest.approx(math.sqrt(np.mean(pairs)), rel=1e-10)


@pytest.mark.parametrize("cuts", [(4,), (3, 7), (1, 2, 9)])
def test_consensus_distance_from_contiguous_blocks_is_the_whole_stacks_bit_for_bit(
        cuts, monkeypatch):
    """What a run over processes computes: each block continues the previous block's float64
    row sum, and the blocks' centred row norms are put together."""
    monkeypatch.setattr(metrics, "ROW_SUM_TILE", 100)           # several column tiles
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(10, 333, generator=gen) * torch.logspace(-6, 3, 333)   # mixed magnitudes
    in_order = torch.zeros(333, dtype=torch.float64)
    for row in x:
        in_order += row.double()
    bounds = list(zip((0, *cuts), (*cuts, 10)))
    acc = torch.zeros(333, dtype=torch.float64)
    for lo, hi in bounds:
        row_sum(x[lo:hi], acc)
    assert torch.equal(acc, in_order) and torch.equal(row_sum(x), in_order)
    mean = (acc / 10).float()
    norms = torch.cat([centred_row_norms(x[lo:hi], mean) for lo, hi in bounds])
    assert sq_distance_of_norms(norms) == consensus_sq_distance(x)
    assert consensus_sq_distance(x) == pytest.approx(
        consensus_sq_distance(x.double()), rel=1e-6)


def test_mean_pairwise_distance_is_the_papers_delta():
    x = torch.randn(7, 5)
    pairs = [float((x[i] - x[j]).double().norm()) for i, j in itertools.combinations(range(7), 2)]
    assert mean_pairwise_distance(x) == pytest.approx(np.mean(pairs), rel=1e-6)
    assert mean_pairwise_distance(x) <= consensus_distance(x) + 1e-9      # Jensen


def test_consensus_distance_edge_cases():
    assert consensus_distance(torch.ones(1, 4)) == 0.0
    assert consensus_distance(torch.ones(5, 4)) == 0.0
    # two points at distance 2: every ordered pair has squared distance 4
    assert consensus_distance(torch.tensor([[0.0, 0.0], [2.0, 0.0]])) == pytest.approx(2.0)
    assert math.isnan(consensus_distance(torch.tensor([[float("nan")], [0.0]])))


def test_jain_index_on_known_vectors():
    assert jain_index([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([1, 2, 3]) == pytest.approx(36 / (3 * 14))
    assert jain_index([0.9, 0.9]) == pytest.approx(1.0)
    assert jain_index([0, 0, 0]) == 1.0
    assert math.isnan(jain_index([]))


def test_divergence_detection():
    assert diverged(2.0, 2.3, 1e3) is None
    assert "NaN" in str(diverged(float("nan"), 2.3, 1e3)) or "nan" in diverged(float("nan"),
                                                                                2.3, 1e3)
    assert "inf" in diverged(float("inf"), 2.3, 1e3)
    assert "exceeded" in diverged(3000.0, 2.0, 1e3)
    assert diverged(3000.0, None, 1e3) is None
