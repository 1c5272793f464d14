"""Sparsifiers: exact top-k, shared random-k masks, error feedback."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from airplan_qo.errors import ValidationError
from airplan_qo.runtime.compression import (
    ErrorFeedback,
    common_mask,
    compress,
    k_from_ratio,
    topk_indices,
)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), d=st.integers(1, 60), k_frac=st.floats(0.01, 1.0),
       seed=st.integers(0, 10_000))
def test_topk_is_exact_against_a_sort(n, d, k_frac, seed):
    k = max(1, min(d, int(round(k_frac * d))))
    v = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32))
    idx = topk_indices(v, k)
    for row in range(n):
        ranked = np.argsort(-np.abs(v[row].numpy()), kind="stable")
        assert set(idx[row].tolist()) == set(ranked[:k].tolist())
    sparse = compress(v, k, "topk")
    dense = sparse.dense()
    assert torch.equal(dense[torch.arange(n).unsqueeze(1), idx], v.gather(1, idx))
    assert int((dense != 0).sum()) <= n * k


def test_topk_error_bound():
    v = torch.randn(8, 500)
    for k in (1, 50, 250, 500):
        err = (v - compress(v, k, "topk").dense()).norm(dim=1) ** 2
        assert torch.all(err <= (1 - k / 500) * v.norm(dim=1) ** 2 + 1e-4)


def test_common_mask_is_shared_and_seeded():
    v = torch.randn(5, 100)
    gen = torch.Generator().manual_seed(3)
    sparse = compress(v, 10, "common_randk", generator=gen)
    assert sparse.common and sparse.indices.shape == (10,)
    support = sparse.support_mask()
    assert torch.equal(support, support[0].expand_as(support))      # identical across rows
    assert torch.equal(sparse.indices, sparse.indices.sort().values)
    assert sparse.indices.unique().numel() == 10
    again = common_mask(100, 10, torch.Generator().manual_seed(3))
    assert torch.equal(again, sparse.indices)
    other = common_mask(100, 10, torch.Generator().manual_seed(4))
    assert not torch.equal(other, sparse.indices)
    torch.testing.assert_close(sparse.dense()[:, sparse.indices], v[:, sparse.indices])


def test_common_mask_is_roughly_uniform():
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(50)
    for _ in range(2000):
        counts[common_mask(50, 5, gen)] += 1
    assert counts.min() > 150 and counts.max() < 250          # expected 200 each


def test_error_feedback_accumulates_the_residual():
    torch.manual_seed(0)
    ef = ErrorFeedback(3, 40)
    sent_total = torch.zeros(3, 40)
    input_total = torch.zeros(3, 40)
    for _ in range(25):
        v = torch.randn(3, 40)
        before = ef.memory.clone()
        sparse = ef.compress(v, 4, "topk")
        q = sparse.dense()
        torch.testing.assert_close(ef.memory, v + before - q)
        sent_total += q
        input_total += v
    # nothing is lost: what was sent plus what is still owed equals everything put in
    torch.testing.assert_close(sent_total + ef.memory, input_total, rtol=1e-5, atol=1e-5)


def test_error_feedback_skips_inactive_rows():
    ef = ErrorFeedback(2, 10)
    ef.memory[:] = 1.0
    rows = torch.tensor([True, False])
    sparse = ef.compress(torch.ones(2, 10), 3, "topk", rows=rows)
    assert torch.all(sparse.values[1] == 0)
    assert torch.all(ef.memory[1] == 1.0)
    assert float(ef.memory[0].sum()) == pytest.approx(20 - 6)


def test_k_from_ratio():
    assert k_from_ratio(1.0, 4810) == 4810
    assert k_from_ratio(0.1, 4810) == 481
    assert k_from_ratio(1e-9, 4810) == 1
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValidationError):
            k_from_ratio(bad, 10)


def test_unknown_mask():
    with pytest.raises(ValidationError, match="mask must be one of"):
        compress(torch.zeros(2, 4), 1, "randk")
