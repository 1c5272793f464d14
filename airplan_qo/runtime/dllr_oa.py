"""DLLR-OA (Qiao et al., MobiHoc 2023: decentralized learning with over-the-air mixing of
layer masks), reproduced from what its published code does, not from the paper's equations
where they differ.

One round, after the local steps (the workload's; the code runs 5 epochs of Adam, our runtime
momentum SGD, docs/runtime.md):

* The receivers are processed **one after the other, in place** (Gauss-Seidel, order 0..N-1):
  a later receiver hears neighbours that have already mixed this round. ``order='jacobi'``
  mixes every receiver from the models of the round's start instead (x <- W x on the mask).
* Receiver i draws a mask M_i of m = max(1, round(k L)) of the model's L parameter tensors
  (layers): ``random`` (a uniform draw), ``weight`` (the m tensors of largest norm in its own
  model) or ``grad`` (the m of largest norm in its round's local update x - x_prev, the
  gradient it just followed). Only the masked tensors are mixed; the others keep x_i.
* Its neighbours j send b_ij h_ij x_j[M_i] with the power-limited inversion
  b_ij = xi_j W_ij / h_ij, xi_j = sqrt(beta_j), beta_j = beta + N(0, beta_noise^2) (the code's
  estimate of the power budget), so that the channel's gain cancels. The receiver scales the
  superposition by alpha_i = (# neighbours) / sum_j xi_j (the code's "eq5"):

      x_i[M_i] <- alpha_i (sum_j xi_j W_ij x_j[M_i] + n_i) + W_ii x_i[M_i]

  With ``beta_noise = 0`` alpha_i xi_j = 1 exactly: the receiver gets its row of W.
* Noise n_i: the code's fixed ``sigma`` per coordinate (``sigma`` set: the faithful variant,
  whatever the channel), or our channel's (``sigma`` None: the SNR, fading truncation and
  dropout of the plan's channel, the noise standard deviation of the strongest weighted payload
  at the weakest up link, as D-SGD's receivers get; then alpha_i does not scale it, the
  receiver's estimate of its row sum carries it).
* A link down (truncated or an end offline) sends nothing; its weight W_ij stays with the
  receiver (as D-SGD's dropped links do), and an offline receiver keeps its model.

The masks, beta draws and noise come from the run's generators (the training generator for the
random masks, the channel's for beta and noise), which checkpoints keep: the rule itself has no
state between rounds.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import ExecutionError
from .channel import Channel, RoundLinks
from .device import to_device
from .gossip import Exchange, LinkSet

__all__ = ["DLLROA", "DLLR_BETA", "DLLR_BETA_NOISE", "DLLR_SIGMA", "LAYER_MASKS", "ORDERS",
           "masked_tensors"]

#: How a receiver chooses the tensors it mixes (the code's ``comp_strategy``).
LAYER_MASKS = ("random", "weight", "grad")
#: Gauss-Seidel (the code: in place, receiver after receiver) or Jacobi (x <- W x).
ORDERS = ("gauss_seidel", "jacobi")
#: The code's configuration: sigma = 0.01, beta = 0.8, beta_noise = 0.01.
DLLR_SIGMA = 0.01
DLLR_BETA = 0.8
DLLR_BETA_NOISE = 0.01


def masked_tensors(count: int, k_ratio: float) -> int:
    """How many of a model's ``count`` parameter tensors a receiver mixes at mask fraction k."""
    return min(count, max(1, int(round(k_ratio * count))))


class DLLROA:
    """DLLR-OA's receiver-by-receiver masked over-the-air mixing (module docstring)."""

    name = "dllr_oa"

    def __init__(self, n: int, offsets, numels, k_ratio: float, layer_mask: str = "random",
                 sigma: float | None = DLLR_SIGMA, order: str = "gauss_seidel",
                 beta: float = DLLR_BETA, beta_noise: float = DLLR_BETA_NOISE):
        if layer_mask not in LAYER_MASKS:
            raise ExecutionError(f"dllr_oa layer mask must be one of {', '.join(LAYER_MASKS)}, "
                                 f"got {layer_mask!r}")
        if order not in ORDERS:
            raise ExecutionError(f"dllr_oa order must be one of {', '.join(ORDERS)}, "
                                 f"got {order!r}")
        self.n = n
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.numels = np.asarray(numels, dtype=np.int64)
        self.d = int(self.numels.sum())
        self.m = masked_tensors(len(self.numels), k_ratio)
        self.layer_mask, self.sigma, self.order = layer_mask, sigma, order
        self.beta, self.beta_noise = float(beta), float(beta_noise)
        #: the "grad" rule reads the round's local update x - x_prev
        self.needs_prev = layer_mask == "grad"

    # ------------------------------------------------------------------------------- masks

    def _norms(self, v: torch.Tensor) -> np.ndarray:
        sq = (v.double() ** 2).cpu().numpy()
        return np.add.reduceat(sq, self.offsets) if sq.size else np.zeros(0)

    def _mask(self, i: int, x: torch.Tensor, x_prev: torch.Tensor | None,
              gen: torch.Generator | None) -> np.ndarray:
        """The tensor indices receiver i mixes this round (sorted)."""
        count = len(self.numels)
        if self.m == count:
            return np.arange(count)
        if self.layer_mask == "random":
            if gen is None:
                raise ExecutionError("dllr_oa random layer masks need the training generator")
            return np.sort(torch.randperm(count, generator=gen).numpy()[:self.m])
        if self.layer_mask == "weight":
            norms = self._norms(x[i])
        else:
            if x_prev is None:
                raise ExecutionError("dllr_oa gradient-norm masks need the round's start models")
            norms = self._norms(x[i] - x_prev[i])
        return np.sort(np.argsort(-norms, kind="stable")[:self.m])

    def _columns(self, tensors: np.ndarray, device: torch.device) -> torch.Tensor:
        cols = np.concatenate([np.arange(self.offsets[t], self.offsets[t] + self.numels[t])
                               for t in tensors])
        return to_device(cols, device)

    # ------------------------------------------------------------------------------- round

    def communicate(self, x: torch.Tensor, links: LinkSet, rl: RoundLinks, channel: Channel,
                    train_gen: torch.Generator | None = None,
                    x_prev: torch.Tensor | None = None, **_: object) -> Exchange:
        device = x.device
        up = links.up(rl)
        source = x.clone() if self.order == "jacobi" else x   # Gauss-Seidel: in place
        k_recv = np.zeros(self.n, dtype=np.int64)
        n_tx = np.zeros(self.n, dtype=np.int64)
        link_nnz: list[int] = []
        for i in range(self.n):
            mine = links.recv == i
            if not mine.any() or not rl.active[i]:
                continue
            ids = np.flatnonzero(mine & up)
            lost = float(links.w[mine & ~up].sum())
            own = float(links.diag[i]) + lost
            if not ids.size:
                continue          # every link down: W_ii + lost = 1, the model stays
            cols = self._columns(self._mask(i, x, x_prev, train_gen), device)
            send = links.send[ids]
            w = links.w[ids]
            if self.beta_noise:
                beta = self.beta + self.beta_noise * channel.randn(ids.size).double().cpu().numpy()
                xi = np.sqrt(np.maximum(beta, 0.0))
            else:
                xi = np.full(ids.size, math.sqrt(self.beta))
            alpha = ids.size / xi.sum() if xi.sum() > 0 else 0.0
            senders = source[to_device(send, device)][:, cols]
            coef = torch.from_numpy(alpha * xi * w).to(device, x.dtype)
            agg = coef @ senders
            if self.sigma is not None:
                if self.sigma:
                    agg += alpha * self.sigma * channel.randn(cols.numel()).to(device, x.dtype)
            elif channel.noisy:
                power = float(((torch.from_numpy(w).to(device, torch.float64) ** 2)
                               * (senders.double() ** 2).sum(dim=1)).max()) / cols.numel()
                g_min = float(rl.h2[links.edge[ids]].min())
                std = float(channel.noise_std(np.array([power]), np.array([g_min]))[0])
                agg += std * channel.randn(cols.numel()).to(device, x.dtype)
            x[i, cols] = agg + own * source[i, cols]
            k_recv[i] = cols.numel()
            n_tx[i] = ids.size
            link_nnz += [int(cols.numel())] * ids.size
        nnz = np.asarray(link_nnz, dtype=np.int64)
        return Exchange(k_recv, n_tx, nnz, np.zeros(nnz.size), x)

    def rewire(self, links: LinkSet) -> None:
        return None

    def state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        return None
