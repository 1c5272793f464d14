"""Run metrics over stacked (N x d) client models: consensus distance, fairness, accuracy.

Consensus distance. The paper's divergence signal is the mean pairwise L2 distance
Delta = mean_{i<j} ||x_i - x_j||, which costs O(N^2 d). Mean-centring gives the mean *squared*
pairwise distance exactly in O(N d):

    mean_{i != j} ||x_i - x_j||^2 = 2N / (N - 1) * mean_i ||x_i - xbar||^2,

and the runtime reports its square root, the root-mean-square pairwise distance
(:func:`consensus_distance`). By Jensen it is >= Delta, equal when all pairwise distances are
equal. :func:`mean_pairwise_distance` computes the paper's Delta exactly (Gram matrix, O(N^2 d))
when that is wanted.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

__all__ = [
    "consensus_distance",
    "consensus_sq_distance",
    "diverged",
    "jain_index",
    "mean_pairwise_distance",
]


def consensus_sq_distance(x: torch.Tensor, scratch: torch.Tensor | None = None) -> float:
    """Mean squared pairwise distance over ordered pairs i != j, in O(N d) (0 for N = 1).

    Centres on the mean (exact near consensus, unlike ||x||^2 - N ||xbar||^2), takes per-row
    norms in the input precision and sums their squares in float64 (relative error ~1e-7 at
    N = 100, d = 95k, and 10x faster than a column-wise variance). Pass ``scratch`` to reuse
    memory: allocating a fresh (N x d) tensor costs more than the arithmetic for large d.
    """
    n = x.shape[0]
    if n < 2:
        return 0.0
    centred = torch.sub(x, x.mean(dim=0, keepdim=True), out=scratch)
    rows = torch.linalg.vector_norm(centred, dim=1).double()
    return float((rows * rows).sum()) / n * 2.0 * n / (n - 1)


def consensus_distance(x: torch.Tensor, scratch: torch.Tensor | None = None) -> float:
    """Root-mean-square pairwise distance sqrt(2N/(N-1) * mean_i ||x_i - xbar||^2);
    ``scratch`` (same shape as ``x``) avoids allocating the centred copy."""
    value = consensus_sq_distance(x, scratch)
    return math.sqrt(value) if value >= 0 else float("nan")


def mean_pairwise_distance(x: torch.Tensor) -> float:
    """The paper's Delta = mean over pairs i < j of ||x_i - x_j||_2 (exact, O(N^2 d))."""
    n = x.shape[0]
    if n < 2:
        return 0.0
    xd = x.double()
    sq = (xd ** 2).sum(dim=1)
    gram = xd @ xd.T
    dist2 = (sq.unsqueeze(0) + sq.unsqueeze(1) - 2.0 * gram).clamp_min(0.0)
    iu = torch.triu_indices(n, n, offset=1)
    return float(dist2[iu[0], iu[1]].sqrt().mean())


def jain_index(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all equal, 1/n when one holds
    everything. An all-zero vector counts as perfectly fair (1.0)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return float("nan")
    denom = x.size * float(np.sum(x * x))
    return 1.0 if denom == 0.0 else float(np.sum(x)) ** 2 / denom


def diverged(loss: float, initial_loss: float | None, factor: float) -> str | None:
    """A reason string when ``loss`` is not finite or exceeds ``factor`` x the initial loss."""
    if not math.isfinite(loss):
        return f"training loss became {loss}"
    if initial_loss is not None and math.isfinite(initial_loss) and initial_loss > 0 \
            and loss > factor * initial_loss:
        return (f"training loss {loss:.4g} exceeded {factor:g} x the initial loss "
                f"{initial_loss:.4g}")
    return None

