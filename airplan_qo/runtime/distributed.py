"""One training run across processes (CPUs, GPUs, hosts) with ``torch.distributed``.

The clients are split into contiguous blocks, one per process (rank) of a group that
``torchrun`` starts (:func:`blocks`: the first N mod R ranks get one client more). Each rank
trains only its block: the local SGD steps, their momentum buffers, gradients and minibatches
are the block's. Everything else is the single-process engine's code, run on every rank:

- every rank draws the round's dropout and fading (the channel's numpy generator), the
  minibatch indices of all N clients (one numpy generator), the shared rand-k mask and
  MATCHA's activations (the training generator) and the receivers' noise and the quantiser's
  uniforms (the channel's torch generator) exactly as one process would, each draw the size of
  the whole round, and uses its block's share of the minibatches;
- after local training a rank receives, point to point (``batch_isend_irecv``), only the rows
  its own clients mix with this round: the senders j of every link (i, j) of the round's
  W^t with receiver i in its block (:func:`needed_rows`; every rank knows W^t, so every rank
  knows what every other rank needs and no request travels). What travels is what the rule's
  receivers use: the half-step models for D-SGD (either over-the-air form, or digital with
  exact packets), MATCHA and push-sum (whose weight w_j travels with its row: over a noisy
  channel only j's owner knows it); for CHOCO with a common mask the k masked columns of
  the senders' replicas, and for quantised digital gossip the senders' public copies, each
  right after their update (the rule's ``share`` hook). FedAvg's server, paper_literal and
  Clique Averaging (which use other clients' models of the previous round) and CHOCO with
  top-k masks (whose receivers' noise draws depend on every receiver's listening set) receive
  every block in one ``all_gather`` instead (:meth:`DistributedTrainer._reach`), as does a
  trainer built with ``exchange='all'``;
- split by rows (:mod:`.row_split`; automatic where it applies: D-SGD in either over-the-air
  form or on the ideal channel, digital D-SGD (exact or quantised packets), MATCHA over either,
  push-sum and CHOCO with the common rand-k mask, on the CPU, where every operator of the
  single-process run takes the sparse form, i.e. more than 2000 clients or fewer than N^2 / 8
  nonzeros of W: a ring of 25 or more), a rank holds only its block and, after it, the round's
  halo, the senders into its block in that round (a table of the block and the largest halo of
  any round; :attr:`DistributedTrainer.held` lists every client it holds over the period), and
  the rule's state for those rows (push-sum's weights, CHOCO's replicas and aggregates,
  quantised gossip's public copies, the difference form's aggregates and remembered centred
  models; every link's missed packets and last delivery are counted on every rank), and applies
  the rule to that table with its share of the links (:class:`.row_split.LocalLinks`): each row
  of the sparse product adds the same terms in the same order (stored in the clients' order),
  every per-receiver quantity comes from the receiver's own links, and the round's noise (and
  the quantiser's uniforms) are drawn whole, 16 rows at a time, keeping its rows
  (:class:`.row_split.HaloNoise`). The average model is taken a slab of columns at a time
  (:func:`.row_split.column_mean`: every block's columns of the slab gathered, then torch's
  mean over the rows, which equals those columns of the whole stack's mean), so no rank holds
  every model on evaluated rounds or at the end of :meth:`run`
  (:meth:`DistributedTrainer.models` gathers them on request);
- otherwise every rank applies the update rule (:mod:`.gossip` and the other rule modules) to
  the whole N x d stack as one process does. Rows it neither owns nor received hold stale but
  finite values, which its own rows never see: their weight W_ij is 0 and 0 x finite = 0
  exactly, every per-receiver quantity (noise level, shrinkage, aggregates) is computed from
  the receiver's own links, and every random draw has the round's full size. So a rank's own
  rows and its rows of the rule's state are exact; :meth:`DistributedTrainer.gather_models`
  and the rule state's gathering bring every row back where all are needed (evaluation of the
  average model, checkpoints, a rewiring, the end of :meth:`~DistributedTrainer.run`). A round
  that is evaluated with a rule that keeps no state between rounds gathers every half-step
  model instead and mixes them all (:meth:`DistributedTrainer.step`); a rule with state that
  is evaluated every round gathers every block every round;
- metrics: the consensus distance is computed from the blocks with the single-process
  arithmetic (:func:`.metrics.consensus_sq_distance`): the float64 row sum passes from rank to
  rank in row order, the last rank sends the mean back, and the N centred row norms are
  gathered; each rank scores its own clients (the counts are gathered); on evaluated rounds
  every rank gathers all models and computes the average model's accuracy.

So a run on R ranks computes the same arithmetic on the same numbers as one process: its round
statistics and models equal the single-process run's bit for bit wherever the local training of
a block equals that of the whole stack (the ``batched`` strategy of MLPs and logistic models, the
``loop`` and ``vmap`` strategies of every model); the grouped convolutions of ``batched`` conv
models round differently for other numbers of clients, so those agree to float rounding.

Traffic per round and rank (:attr:`DistributedTrainer.traffic_log`): the rows above (on a
ring, 2 rows whatever N and R; one-peer exponential, at most one per client of the block),
N x ``local_steps`` losses, the consensus distance's d float64 partial sum and d float32 mean
and N float64 norms, and on evaluated rounds every block (for the average model) and N
accuracy counts: the exchange saves on the rounds that are not evaluated (split by rows, an
evaluated round receives every block's columns slab by slab for the average model instead).

Memory per rank: split by rows, the table of its block and largest round's halo ((B + H) x d:
on a ring B + 2 rows, on one-peer exponential at most 2B), its scratch buffer and the round's
temporaries of the same size, the rule's state for those rows, the block's momentum, gradients
and batches, and on evaluated rounds a slab of N x (about B d / 4N) columns (a quarter of a
block's numbers, twice: the gathered pieces and the slab); measured with
``benchmarks/bench_distributed.py`` (docs/runtime.md). Otherwise (CHOCO with top-k masks,
FedAvg, FedProx, paper_literal, Clique Averaging, dense operators, a GPU, ``exchange='all'``)
it is still the N x d stack, its scratch buffer and the rule's state, as in one process: the
rows a rank does not need are kept, stale. A resume sends each rank only its share of the
checkpoint (:meth:`DistributedTrainer._share_of`). Not split in either case: rank 0 holds the
whole checkpoint while it reads or writes it (a checkpoint gathers every model, the momentum
and the rule's rows there), and a rewiring gathers every row on every rank before the new
links' rows are kept.

Two ways to drive it:

- *leader* (the CLI under ``torchrun -m airplan_qo ...``, :func:`main`): rank 0 runs the command
  as a single process would (it alone reads and writes the catalog) and, whenever it builds a
  trainer, sends the job to the other ranks, which wait in :func:`serve`; checkpoints (rank 0
  writes them, every client's model, momentum and rule state gathered from its rank),
  resumes (rank 0 reads the file and sends each rank its state), re-optimisation (a rewiring
  on rank 0 is repeated on every rank) and the callback's decisions travel as messages from
  rank 0.
- *every rank* (Python): each process builds ``DistributedTrainer(config, dataset, partition,
  topology)`` with the same arguments and calls ``run``, ``save`` or ``load`` at the same points;
  the callback runs on rank 0 and its ``"stop"`` applies to all.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

import attrs
import numpy as np
import torch

from ..errors import AirPlanError, ExecutionError
from . import distributed_launch as launched
from .channel import dbm_to_watt
from .device import available_bytes, to_device
from .digital import Digital
from .engine import RunConfig, RunResult, Trainer
from .clique_averaging import clique_averaging_enabled
from .federated import FEDERATED
from .gossip import DSGD, Choco, Exchange
from .metrics import centred_row_norms, row_sum, sq_distance_of_norms
from .push_sum import PushSum
from ..plans.operators import WEIGHT_REPEATS
from .digital import SCALE_BITS
from .row_split import COLUMN_SLAB, HaloNoise, LocalLinks, column_mean, global_exchange, \
    held_rows, local_round, set_rule_rows, splits, table_rows

__all__ = ["DISTRIBUTED_ALGORITHMS", "EXCHANGES", "DistributedTrainer", "Group", "MemoryShare",
           "RoundTraffic", "active", "blocks", "check_distributed", "init", "launched", "lead",
           "main", "memory_refusal", "needed_rows", "serve", "shutdown"]

#: The keys of the rules' states that hold one row per client: push-sum's weights ``w``,
#: the public copies ``xhat`` (CHOCO, quantised digital gossip) and the receivers' aggregates
#: ``s`` (CHOCO, D-SGD's difference form).
ROW_STATE = ("w", "xhat", "s")

#: The environment ``torchrun`` (or any launcher) sets for every process.
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: Environment variable naming the backend: ``gloo`` (CPU tensors) or ``nccl`` (CUDA tensors;
#: the group then also has a gloo part for the messages between ranks).
BACKEND_ENV = "AIRPLAN_BACKEND"
BACKENDS = ("gloo", "nccl")


class Group:
    """This process's place in the group: ``rank`` of ``world``, ``local_rank`` on its host,
    and the backend the group was started with."""

    def __init__(self, rank: int, world: int, local_rank: int, backend: str):
        self.rank, self.world, self.local_rank, self.backend = rank, world, local_rank, backend

    def __repr__(self) -> str:
        return (f"Group(rank={self.rank}, world={self.world}, local_rank={self.local_rank}, "
                f"backend={self.backend!r})")


_GROUP: Group | None = None


def active() -> Group | None:
    """The group this process joined with :func:`init`, or None."""
    return _GROUP


def init(backend: str | None = None) -> Group:
    """Join the process group described by the launcher's environment (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; ``LOCAL_RANK`` for the GPU of a rank).
    ``backend``: ``gloo`` or ``nccl`` (default: :data:`BACKEND_ENV`, else ``nccl`` where CUDA is
    available and ``gloo`` otherwise). With ``nccl`` the group moves CUDA tensors through NCCL
    and CPU tensors (the messages between ranks, a CPU run) through gloo, and each rank trains
    on the GPU of its ``LOCAL_RANK``."""
    global _GROUP
    import torch.distributed as dist

    if _GROUP is not None:
        return _GROUP
    missing = [name for name in LAUNCH_ENV if name not in os.environ]
    if missing:
        raise ExecutionError(
            f"a distributed run needs the launcher's environment; {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set (start it with: torchrun "
            f"--nproc-per-node 2 -m airplan_qo sql \"TRAIN ...\")")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    chosen = (backend or os.environ.get(BACKEND_ENV)
              or ("nccl" if torch.cuda.is_available() else "gloo")).strip().lower()
    if chosen not in BACKENDS:
        raise ExecutionError(f"backend must be one of {', '.join(BACKENDS)}, got {chosen!r}")
    if chosen == "nccl":
        if not torch.cuda.is_available():
            raise ExecutionError(
                "backend 'nccl' needs CUDA GPUs, but torch.cuda.is_available() is false on this "
                "machine; use backend 'gloo' (AIRPLAN_BACKEND=gloo) for CPU runs")
        if local_rank >= torch.cuda.device_count():
            raise ExecutionError(
                f"rank {rank} has local rank {local_rank} but this host has "
                f"{torch.cuda.device_count()} CUDA device(s): start at most that many "
                f"processes per host (--nproc-per-node)")
        torch.cuda.set_device(local_rank)
        spec = "cpu:gloo,cuda:nccl"       # messages between ranks go through gloo
    else:
        if not dist.is_gloo_available():
            raise ExecutionError("this torch build has no gloo backend")
        spec = "gloo"
    dist.init_process_group(backend=spec, rank=rank, world_size=world)
    _GROUP = Group(rank, world, local_rank, chosen)
    return _GROUP


def shutdown() -> None:
    """Leave the group (after every rank is done)."""
    global _GROUP
    import torch.distributed as dist

    if _GROUP is not None and dist.is_initialized():
        dist.destroy_process_group()
    _GROUP = None


def blocks(n: int, world: int) -> list[tuple[int, int]]:
    """Contiguous client ranges (lo, hi), one per rank: the first ``n mod world`` ranks hold
    one client more. ExecutionError when there are more ranks than clients."""
    if world > n:
        raise ExecutionError(
            f"{world} processes for {n} clients: every process needs at least one client; "
            f"start at most {n} (--nproc-per-node)")
    base, extra = divmod(n, world)
    sizes = [base + (r < extra) for r in range(world)]
    ends = np.cumsum(sizes)
    return [(int(e - s), int(e)) for s, e in zip(sizes, ends)]


def _send(message: tuple) -> None:
    import torch.distributed as dist

    dist.broadcast_object_list([message], src=0, device=torch.device("cpu"))


def _receive() -> tuple:
    import torch.distributed as dist

    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0, device=torch.device("cpu"))
    return box[0]


#: The update rules a run split over processes applies (the others are refused). They act on
#: the half-step models and their own state only (the digital transport's quantiser draws from
#: the channel generator and MATCHA's activations from the training generator, in step on
#: every rank).
DISTRIBUTED_ALGORITHMS = ("dsgd", "choco", "paper_literal", "matcha", "push_sum", "fedavg",
                          "fedprox")


def check_distributed(config: RunConfig) -> None:
    """Refuse gradient tracking, whose gradients are taken at the mixed models, between two
    exchanges, rather than in the local steps the split run does per block."""
    algorithm = config.resolved_algorithm
    if algorithm not in DISTRIBUTED_ALGORITHMS:
        raise ExecutionError(
            f"algorithm {algorithm!r} does not run split over processes (only "
            f"{', '.join(DISTRIBUTED_ALGORITHMS)} do); run it in one process "
            f"(without torchrun, or --nproc-per-node 1)")


#: How a run over processes exchanges the half-step models (``DistributedTrainer(...,
#: exchange=...)``): ``auto``, each rank receiving the rows its clients mix with (every row for
#: the rules that need them: module docstring), or ``all``, one all_gather of every block.
EXCHANGES = ("auto", "all")


class RoundTraffic:
    """What one rank received in one round: ``rows`` of other ranks' half-step models, their
    ``model_bytes``, and ``other_bytes`` (losses, the consensus distance's partial sums and
    norms, accuracy counts, and on evaluated rounds the models the average model needs)."""

    __slots__ = ("round", "rows", "model_bytes", "other_bytes")

    def __init__(self, round_: int, rows: int = 0, model_bytes: int = 0,
                 other_bytes: int = 0):
        self.round, self.rows = round_, rows
        self.model_bytes, self.other_bytes = model_bytes, other_bytes

    @property
    def bytes(self) -> int:
        return self.model_bytes + self.other_bytes

    def as_dict(self) -> dict[str, int]:
        return {"round": self.round, "rows": self.rows, "model_bytes": self.model_bytes,
                "other_bytes": self.other_bytes, "bytes": self.bytes}

    def __repr__(self) -> str:
        return f"RoundTraffic({self.as_dict()})"


def needed_rows(links: Any, bounds: list[tuple[int, int]]) -> list[np.ndarray]:
    """Per rank, the sorted clients outside its block whose rows its receivers mix with: the
    senders j of every link (i, j) of ``links`` (one :class:`~.gossip.LinkSet` or several,
    whose links are united) with receiver i in the rank's block, i.e. W_ij != 0."""
    sets = links if isinstance(links, (tuple, list)) else (links,)
    recv = np.concatenate([ls.recv for ls in sets])
    send = np.concatenate([ls.send for ls in sets])
    out = []
    for lo, hi in bounds:
        mine = (recv >= lo) & (recv < hi) & ~((send >= lo) & (send < hi))
        out.append(np.unique(send[mine]).astype(np.int64))
    return out


def _inner(rule: Any) -> Any:
    return getattr(rule, "inner", rule)      # MATCHA mixes through its transport's rule


def _shares_replicas(rule: Any) -> bool:
    """Whether the rule's receivers mix public copies (CHOCO's replicas with a common mask,
    quantised digital gossip's copies) rather than the half-step models: those are what
    travel, right after their update (the rule's ``share`` hook)."""
    rule = _inner(rule)
    if isinstance(rule, Choco):
        return rule.mask == "common_randk"
    if isinstance(rule, Digital):
        return not rule.gossip.exact
    return False


def _client_numbers(rule: Any) -> list[torch.Tensor]:
    """The rule's per-client numbers (N,) that travel with a client's row: push-sum's weight
    w_j, which its receivers multiply the row by and which, over a noisy channel, only its
    owner knows (its noise level depends on its own neighbours' rows)."""
    return [rule.w] if isinstance(rule, PushSum) else []


@attrs.frozen
class MemoryShare:
    """What one rank holds in memory: where (its host, and its GPU for a CUDA device), the bytes
    its share needs, the bytes available there (None: the system does not say) and its rows."""

    where: str
    need: int
    available: int | None
    rows: int


def memory_refusal(shares: list[MemoryShare], n: int, d: int, algorithm: str) -> str | None:
    """Why the ranks' shares do not fit, or None: per place (a host's memory, or one GPU), the
    shares of the ranks there summed against :data:`~..plans.footprint.MEMORY_SHARE` of the
    least memory any of them saw available."""
    from ..plans.footprint import MEMORY_SHARE, gib

    places: dict[str, list[int]] = {}
    for rank, share in enumerate(shares):
        places.setdefault(share.where, []).append(rank)
    for where, ranks in places.items():
        seen = [shares[r].available for r in ranks if shares[r].available is not None]
        if not seen:
            continue
        need = sum(shares[r].need for r in ranks)
        if need > MEMORY_SHARE * min(seen):
            rows = ", ".join(f"{shares[r].rows}" for r in ranks)
            who = (f"rank {ranks[0]}" if len(ranks) == 1
                   else f"ranks {', '.join(map(str, ranks))}")
            return (f"{who} of {len(shares)} on {where} hold {rows} of {n} clients' models of a "
                    f"{d}-parameter model with {algorithm}: ~{gib(need)} needed there, "
                    f"{gib(MEMORY_SHARE * min(seen))} available: spread the ranks over more "
                    f"hosts or GPUs, or use fewer clients or a smaller model")
    return None


class DistributedTrainer(Trainer):
    """A :class:`~.engine.Trainer` whose clients are split over the ranks of the group
    (module docstring). Every rank builds it with the same arguments; ``group`` defaults to
    the one :func:`init` joined. ``leader``: rank 0 drives ranks that wait in :func:`serve`
    (the CLI's mode) rather than every rank calling the same methods."""

    def __init__(self, config: RunConfig, dataset: Any, partition: Any, topology: Any, *,
                 group: Group | None = None, leader: bool = False, exchange: str = "auto"):
        check_distributed(config)
        if exchange not in EXCHANGES:
            raise ExecutionError(f"exchange must be one of {', '.join(EXCHANGES)}, "
                                 f"got {exchange!r}")
        self.exchange = exchange
        #: set during a round whose models every rank gathers (:meth:`step`)
        self._full_round = False
        #: one :class:`RoundTraffic` per round this trainer ran: what this rank received
        self.traffic_log: list[RoundTraffic] = []
        self._traffic = RoundTraffic(0)
        #: the link set the rows below were worked out for, and per rank its needed rows
        self._needs: tuple[Any, list[np.ndarray]] | None = None
        #: the clients whose rows this rank holds in ``x`` when the run is split by rows
        #: (:mod:`.row_split`: its block and their senders, sorted), else None (all N rows);
        #: its block is ``x[b0:b1]``
        self.held: np.ndarray | None = None
        self.b0 = self.b1 = 0
        #: per link set of the schedule, this rank's share of it (split by rows)
        self._local: list[tuple[Any, LocalLinks]] = []
        #: quantised digital gossip split by rows: every link's missed packets, as one
        #: process's rule counts them (they depend on the round's draws alone)
        self._missed: np.ndarray | None = None
        #: D-SGD's difference form split by rows: every link's round of its last delivery
        #: (the round's draws alone decide it)
        self._sent: np.ndarray | None = None
        group = group or active()
        if group is None:
            raise ExecutionError("DistributedTrainer needs a process group: call "
                                 "airplan_qo.runtime.distributed.init() first (under torchrun)")
        self.group = group
        n = topology.graph.number_of_nodes()
        self.bounds = blocks(n, group.world)
        self.lo, self.hi = self.bounds[group.rank]
        self._commanding = leader and group.rank == 0
        if group.backend == "nccl" and config.device in ("auto", "cuda"):
            # each rank on its own GPU (the launcher's LOCAL_RANK)
            import attrs

            config = attrs.evolve(config, device=f"cuda:{group.local_rank}")
        super().__init__(config, dataset, partition, topology)
        self._localise()
        self._attach()
        if group.backend == "gloo" and self.device.type == "cuda":
            raise ExecutionError(
                f"this run trains on {config.device} but the process group uses backend "
                f"'gloo', which gathers CPU tensors; start it with AIRPLAN_BACKEND=nccl")
        if self.device.type == "cuda":
            import torch.distributed as dist

            # every rank joins NCCL's communicator before any point-to-point message
            dist.all_reduce(torch.zeros(1, device=self.device))

    @property
    def rank(self) -> int:
        return self.group.rank

    def _trained_rows(self) -> int:
        return self.hi - self.lo

    # -------------------------------------------------------------------------------------
    # the rows held (module docstring; :mod:`.row_split`)

    def _rows_held(self) -> int:
        self._place(self._split_rows())
        rows = self.n if self.held is None else self._table_rows()
        self._check_memory(rows)
        return rows

    def _place(self, held: np.ndarray | None) -> None:
        """Hold the rows of ``held`` (None: every row); the block is ``x[b0:b1]`` (first in the
        table of a run split by rows)."""
        self.held = held
        self.b0 = self.lo if held is None else 0
        self.b1 = self.b0 + (self.hi - self.lo)

    def _check_memory(self, rows: int) -> None:
        """Refuse, before allocating, shares the memory they live in cannot hold: each rank's
        ``rows`` clients' models, scratch copy and rule state and its block's momentum and
        gradients, summed over the ranks that share a host's memory (or a GPU). Every rank
        learns every share and decides the same, so all refuse together with one message."""
        import socket

        import torch.distributed as dist

        from ..plans.footprint import training_bytes

        cfg = self.config
        need = training_bytes(self.n, self.d, self.algorithm, cfg.transport, cfg.bits,
                              held=rows, trained=self.hi - self.lo)
        where = socket.gethostname() + (f" {self.device}" if self.device.type == "cuda" else "")
        shares: list[Any] = [None] * self.group.world
        dist.all_gather_object(shares, MemoryShare(where, need, available_bytes(self.device),
                                                   rows))
        refusal = memory_refusal(shares, self.n, self.d, self.algorithm)
        if refusal is not None:
            raise ExecutionError(refusal)

    def _split_links(self) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per round of the period, (receivers, senders) of its links where the run is split by
        rows (:func:`.row_split.splits`; MATCHA: every edge of the graph, whose matchings it
        samples), else None."""
        if self.exchange != "auto" or self.group.world < 2:
            return None
        if self.algorithm == "matcha":
            from ..plans.graphs import edge_arrays

            u, v = edge_arrays(self.topology.graph)
            links = [(np.concatenate([u, v]), np.concatenate([v, u]))]
        else:
            links = [(ls.recv, ls.send) for ls in self.link_schedule]
        if not splits(self.algorithm, self.device, self.n, links,
                      clique_averaging_enabled(self.topology), self.config.mask):
            return None
        return links

    def _split_rows(self, rank: int | None = None) -> np.ndarray | None:
        """The clients this rank (or ``rank``) holds rows of over the period when the run is
        split by rows, else None: its block and every sender into it."""
        links = self._split_links()
        if links is None:
            return None
        lo, hi = self.bounds[self.rank if rank is None else rank]
        return held_rows(lo, hi, links)

    def _table_rows(self, rank: int | None = None) -> int:
        """The rows of the table of this rank (or ``rank``) of a run split by rows: its block
        and the most senders from outside it of any round."""
        lo, hi = self.bounds[self.rank if rank is None else rank]
        return table_rows(lo, hi, self._split_links())

    def _localise(self, rows: int | None = None) -> None:
        """This rank's share of every link set of the schedule (split by rows), for a table of
        ``rows`` rows (``x``'s by default)."""
        rows = self.x.shape[0] if rows is None else rows
        self._local = ([(links, LocalLinks(links, self.lo, self.hi, rows))
                        for links in self.link_schedule] if self.held is not None else [])

    def _local_of(self, links: Any) -> LocalLinks:
        """This rank's share of ``links`` (split by rows)."""
        return next(local for whole, local in self._local if whole is links)

    def _next_rows(self) -> np.ndarray:
        """The clients of the table's rows in the next round (split by rows)."""
        return self._local_of(self.link_schedule[self.round % len(self.link_schedule)]).held

    def _local_index(self, rows: np.ndarray) -> np.ndarray:
        """Rows of ``x`` holding the given clients this round."""
        return rows if self.held is None else self._local_of(self.links).position(rows)

    @property
    def split(self) -> bool:
        """Whether this run is split by rows: a rank holds its block and the rows its clients
        mix with, not the whole stack (:mod:`.row_split`)."""
        return self.held is not None

    def models(self) -> torch.Tensor:
        """Every client's model, (N x d), on every rank (every rank calls it): ``x`` itself
        when every rank holds the whole stack, else a new tensor gathered from the blocks."""
        if self.held is None:
            self.gather_models()
            return self.x
        full = torch.empty(self.n, self.d, device=self.device)
        self._gather_rows(full, self.x[self.b0:self.b1])
        return full

    def _mix(self, links: Any, x_prev: torch.Tensor | None) -> Exchange:
        """Split by rows: the rule's round on this rank's table with its share of the links
        and the round's noise drawn whole, its receivers' rows kept; the round's exchange (for
        its traffic) is worked out from every link."""
        if self.held is None:
            return super()._mix(links, x_prev)
        cfg = self.config
        mine = self._local_of(self.links)
        mine.seen = None
        inner = _inner(self.rule)
        pushes = isinstance(inner, PushSum)
        packets = inner.gossip if isinstance(inner, Digital) and not inner.gossip.exact \
            else None
        if packets is not None:       # the rank's links' share of every link's count
            if self._missed is None or self._missed.size != self.links.recv.size:
                self._missed = np.zeros(self.links.recv.size, dtype=np.int64)
            packets.missed = self._missed[mine.lids].copy()
        if isinstance(inner, DSGD) and inner.decay and self.channel.noisy \
                and inner.payload == "difference":
            # the rounds whose centred models one process keeps after this round
            if inner.s is None or self._sent is None:
                self._sent = np.full(self.links.recv.size, -1, dtype=np.int64)
            self._sent[self.links.up(links)] = inner.t + 1
            inner.live = set(np.unique(self._sent).tolist())
        noise = HaloNoise(
            self.channel,
            lambda: np.flatnonzero(self.links.receiver_stats(mine.seen)[1] > 0),
            self.lo, self.hi,
            draws=self.channel.noisy and (isinstance(inner, (DSGD, Choco))
                                          or (pushes and not inner.digital)),
            held=mine.held, n=self.n)
        result = self.rule.communicate(self.x, mine, local_round(links, mine.held), noise,
                                       train_gen=self.train_gen, x_prev=x_prev,
                                       scratch=self._scratch,
                                       tx_power_w=dbm_to_watt(cfg.channel.tx_power_dbm),
                                       bandwidth_hz=cfg.channel.bandwidth_hz)
        noise.finish(inner.k if isinstance(inner, Choco)
                     else self.d + (WEIGHT_REPEATS if pushes else 0))
        if result.x is not self.x:
            self._scratch, self.x = self.x, result.x
        bits = None
        if packets is not None:       # every link's packet, and its count, as one process's
            up = self.links.up(mine.seen)
            missed = self._missed
            bits = (np.minimum((missed[up] + 1) * packets.bits, 32) * float(self.d)
                    + SCALE_BITS)
            missed[~up & links.active[self.links.send]] += 1
            missed[up] = 0
        return global_exchange(self.rule, self.links, mine.seen, self.d, self.x,
                               self.channel.noisy, bits)

    def _finite(self) -> bool:
        import torch.distributed as dist

        if self.held is None:
            return super()._finite()
        flag = torch.tensor([int(bool(torch.isfinite(self.x[self.b0:self.b1]).all()))])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def average_model(self) -> torch.Tensor:
        """The mean of the client models (d,); split by rows, every rank computes it a slab of
        columns at a time (:func:`.row_split.column_mean`), each slab's columns of every block
        gathered (every rank calls it)."""
        import torch.distributed as dist

        if self.held is None:
            return super().average_model()
        sizes = [hi - lo for lo, hi in self.bounds]
        pad = max(sizes)
        # a slab of every client's columns holds about a quarter of a block's numbers
        slab = max(COLUMN_SLAB, pad * self.d // (4 * self.n) // COLUMN_SLAB * COLUMN_SLAB)

        def columns(c0: int, c1: int) -> torch.Tensor:
            send = torch.zeros(pad, c1 - c0, device=self.device)
            send[:self.b1 - self.b0] = self.x[self.b0:self.b1, c0:c1]
            parts = [torch.empty_like(send) for _ in sizes]
            dist.all_gather(parts, send)
            self._traffic.other_bytes += (pad * (self.group.world - 1) * (c1 - c0)
                                          * send.element_size())
            return torch.cat([part[:size] for part, size in zip(parts, sizes)])
        return column_mean(self.d, slab, columns)

    # -------------------------------------------------------------------------------------
    # exchanges

    def _gather_rows(self, full: torch.Tensor, mine: torch.Tensor, *,
                     models: bool = False) -> None:
        """``full[lo_r:hi_r] = mine`` of rank r, for every rank r (one all_gather); counted
        in this round's :class:`RoundTraffic` (as model rows when ``models``)."""
        import torch.distributed as dist

        sizes = [hi - lo for lo, hi in self.bounds]
        row = mine[0].numel() * mine.element_size() if mine.dim() else mine.element_size()
        if len(set(sizes)) == 1:
            dist.all_gather(list(full.split(sizes[0])), mine.contiguous())
            received = (self.n - sizes[self.rank])
        else:
            pad = max(sizes)
            send = torch.zeros(pad, *mine.shape[1:], dtype=mine.dtype, device=mine.device)
            send[:mine.shape[0]] = mine
            parts = [torch.empty_like(send) for _ in sizes]
            dist.all_gather(parts, send)
            for (lo, hi), part in zip(self.bounds, parts):
                full[lo:hi] = part[:hi - lo]
            received = pad * (self.group.world - 1)
        if models:
            self._traffic.rows += self.n - sizes[self.rank]
            self._traffic.model_bytes += received * row
        else:
            self._traffic.other_bytes += received * row

    def _reach(self) -> str:
        """What a rank receives of other clients in a round: ``all`` (every half-step model:
        FedAvg's server, paper_literal and Clique Averaging, which use the previous round's
        models of other clients, CHOCO with top-k masks, whose noise draws depend on every
        receiver's listening set; or ``exchange='all'``), ``replicas`` (the public copies its
        receivers mix with, :func:`_shares_replicas`) or ``rows`` (the half-step models its
        receivers mix with)."""
        algorithm = self.algorithm
        if self.held is not None:
            return "replicas" if _shares_replicas(self.rule) else "rows"
        if (self.exchange == "all" or algorithm in FEDERATED or algorithm == "paper_literal"
                or self.clique_averaging is not None
                or (algorithm == "choco" and self.config.mask != "common_randk")):
            return "all"
        if self._full_round or (self.config.eval_every == 1 and not self._stateless()):
            # every rank needs every model after the round (it is evaluated): a stateless
            # rule mixes them all from the gathered half-step models at no extra cost; a rule
            # with state evaluated every round would gather after the mixing on top of the
            # neighbours' rows every round, more than gathering every block
            return "all"
        return "replicas" if _shares_replicas(self.rule) else "rows"

    def _stateless(self) -> bool:
        """Whether the rule keeps no per-client state between rounds (D-SGD sending models or
        centred models, digital D-SGD with exact packets, MATCHA over either): mixing every
        row of the gathered half-step models then gives every client's exact new model."""
        inner = _inner(self.rule)
        if isinstance(inner, DSGD):
            return inner.decay == 0
        if isinstance(inner, Digital):
            return inner.gossip.exact
        return False

    def _attach(self) -> None:
        """Point the rule's ``share`` hook at this trainer when its public copies travel."""
        inner = _inner(self.rule)
        target = inner.gossip if isinstance(inner, Digital) else inner
        if hasattr(target, "share"):
            target.share = self._share if self._reach() == "replicas" else None

    def needed(self) -> list[np.ndarray]:
        """Per rank, the clients outside its block whose rows (models or public copies) it
        receives this round: :func:`needed_rows` of the round's links (every other client
        when the rule needs them all, :meth:`_reach`)."""
        if self._reach() == "all":
            return [np.concatenate([np.arange(0, lo), np.arange(hi, self.n)])
                    for lo, hi in self.bounds]
        if self._needs is None or self._needs[0] is not self.links:
            self._needs = (self.links, needed_rows(self.links, self.bounds))
        return self._needs[1]

    def _exchange_rows(self) -> None:
        """After local training: the half-step models this rank's receivers mix with, into
        ``self.x`` (with push-sum's weights); all of them for a rule that needs every row;
        none for a rule whose public copies travel instead (:meth:`_share`)."""
        reach = self._reach()
        if reach == "all":
            self._gather_rows(self.x, self.x[self.lo:self.hi], models=True)
        elif reach == "rows":
            self._pass_rows(self.x, None, _client_numbers(self.rule))

    def _share(self, replicas: torch.Tensor, columns: torch.Tensor | None) -> None:
        """The rule's hook: the updated public copies (their ``columns``; all when None) of
        the clients this rank's receivers mix with, from the ranks that own them."""
        self._pass_rows(replicas, columns, [])

    def _pass_rows(self, table: torch.Tensor, columns: torch.Tensor | None,
                   numbers: list[torch.Tensor]) -> None:
        """Rows of ``table`` (N x d; only ``columns`` when given) that each rank needs
        (:meth:`needed`) from the ranks that own them, by point-to-point messages, one per
        pair of ranks with rows to pass (every rank knows every rank's needs: the links are
        the same everywhere). ``numbers``: per-client values (N,) that travel with a row, as
        their float64 bits in 2 extra float32 columns each."""
        import torch.distributed as dist

        needs = self.needed()
        if numbers and table.dtype != torch.float32:
            raise ExecutionError(f"rows passed with per-client numbers must be float32 (their "
                                 f"float64 bits take 2 columns), got {table.dtype}")
        cols = table.shape[1] if columns is None else int(columns.numel())
        width = cols + 2 * len(numbers)
        ops, landing = [], []
        mine = needs[self.rank]
        for peer, (lo, hi) in enumerate(self.bounds):
            if peer == self.rank:
                continue
            theirs = needs[peer]
            out = theirs[(theirs >= self.lo) & (theirs < self.hi)]
            if out.size:
                index = to_device(self._local_index(out), self.device)
                payload = torch.empty(out.size, width, dtype=table.dtype, device=self.device)
                # only the columns that travel (CHOCO's k masked ones), not whole rows
                payload[:, :cols] = (table[index] if columns is None
                                     else table[index.unsqueeze(1), columns.unsqueeze(0)])
                for c, values in enumerate(numbers):
                    payload[:, cols + 2 * c:cols + 2 * c + 2] = \
                        values[index].double().unsqueeze(1).view(table.dtype)
                ops.append(dist.P2POp(dist.isend, payload, peer))
            rows = mine[(mine >= lo) & (mine < hi)]
            if rows.size:
                box = torch.empty(rows.size, width, dtype=table.dtype, device=self.device)
                ops.append(dist.P2POp(dist.irecv, box, peer))
                landing.append((rows, box))
        if ops:
            for request in dist.batch_isend_irecv(ops):
                request.wait()
        for rows, box in landing:
            index = to_device(self._local_index(rows), self.device)
            if columns is None:
                table[index] = box[:, :cols]
            else:
                table[index.unsqueeze(1), columns.unsqueeze(0)] = box[:, :cols]
            for c, values in enumerate(numbers):
                values[index] = box[:, cols + 2 * c:cols + 2 * c + 2].contiguous().view(
                    torch.float64).squeeze(1).to(values.dtype)
            self._traffic.rows += rows.size
            self._traffic.model_bytes += box.numel() * box.element_size()

    def gather_models(self) -> None:
        """Every client's model into ``self.x`` on every rank (one all_gather; every rank
        calls it). Between rounds of a neighbour-only exchange a rank holds its own rows and
        the ones it last received; :meth:`run`, evaluation and checkpoints call this. A run
        split by rows holds no whole stack: :meth:`models` returns it instead."""
        if self.held is not None:
            raise ExecutionError("this run is split by rows: each rank holds its block and the "
                                 "rows its clients mix with; trainer.models() gathers every "
                                 "client's model")
        if self._reach() != "all":
            self._gather_rows(self.x, self.x[self.lo:self.hi])

    def _sync_rule_state(self) -> None:
        """The rule's per-client state rows (public copies, aggregates, remembered payloads)
        from the ranks that own them, on every rank (every rank calls it)."""
        if self._reach() == "all":
            return
        for values in _client_numbers(self.rule):
            self._gather_rows(values, values[self.lo:self.hi])
        state = self.rule.state()
        if not state:
            return
        for value in state.values():
            if not isinstance(value, torch.Tensor):
                continue
            if any(value is v for v in _client_numbers(self.rule)):
                continue
            if value.dim() == 2 and value.shape[0] == self.n:
                self._gather_rows(value, value[self.lo:self.hi])
            elif value.dim() == 3 and value.shape[1] == self.n:
                for part in value:
                    self._gather_rows(part, part[self.lo:self.hi])
        self.rule.set_state(state)

    def _consensus(self) -> float:
        """The consensus distance from the blocks, as one process computes it from the whole
        stack: the float64 row sum passed from rank to rank in row order, its mean sent back
        by the last rank, and every block's centred row norms gathered."""
        import torch.distributed as dist

        if self._reach() == "all":
            return super()._consensus()
        if self.n < 2:
            return 0.0
        last = self.group.world - 1
        acc = torch.zeros(self.d, dtype=torch.float64, device=self.device)
        if self.rank > 0:
            dist.recv(acc, src=self.rank - 1)
            self._traffic.other_bytes += acc.numel() * acc.element_size()
        row_sum(self.x[self.b0:self.b1], acc)
        if self.rank < last:
            dist.send(acc, dst=self.rank + 1)
        mean = (acc / self.n).to(self.x.dtype)
        dist.broadcast(mean, src=last)
        if self.rank != last:
            self._traffic.other_bytes += mean.numel() * mean.element_size()
        norms = centred_row_norms(self.x[self.b0:self.b1], mean,
                                  self._scratch[self.b0:self.b1])
        everyone = torch.zeros(self.n, dtype=torch.float64, device=self.device)
        self._gather_rows(everyone, norms)
        value = sq_distance_of_norms(everyone)
        return math.sqrt(value) if value >= 0 else float("nan")

    def _evaluate(self) -> tuple[float, np.ndarray]:
        if self.held is None:
            self.gather_models()      # the average model needs every client's
        return super()._evaluate()

    def step(self, train: bool = True) -> dict:
        """:meth:`Trainer.step`; a round that will be evaluated with a stateless rule gathers
        every half-step model instead of the neighbours' (the average model needs them all)."""
        cfg = self.config
        r = self.round + 1
        self._traffic = RoundTraffic(r)
        self._full_round = (self.held is None and self._stateless()
                            and (r % cfg.eval_every == 0 or r == cfg.rounds))
        try:
            return super().step(train)
        finally:
            self._full_round = False
            self.traffic_log.append(self._traffic)
            self._traffic = RoundTraffic(-1)      # what moves between rounds is not counted

    def _result(self, status: str, reason: str | None, saved: str | None) -> RunResult:
        if self.held is None:
            self.gather_models()      # the run ends with every model on every rank
        return super()._result(status, reason, saved)

    # -------------------------------------------------------------------------------------
    # one round

    def _local_train(self, trainable: np.ndarray) -> float:
        """The engine's local training on this rank's block, then the blocks gathered: every
        rank ends with all N half-step models and the same round loss as one process."""
        cfg = self.config
        lo, hi = self.lo, self.hi
        mine = trainable[lo:hi]
        n_rows = int(mine.sum())
        every = bool(mine.all())
        rows = None if every else to_device(np.flatnonzero(mine), self.device)
        block = self.x[self.b0:self.b1]
        self._local_options(slice(self.b0, self.b1), rows)
        params = block if rows is None else block[rows]
        buf = self.m if rows is None else self.m[rows]
        grads = self._g[:n_rows]
        losses = torch.zeros(hi - lo, cfg.local_steps, device=self.device)
        for step in range(cfg.local_steps):
            idx = self._sample()          # all N clients' draws, as one process makes them
            if n_rows == 0:
                continue
            idx = idx[lo:hi] if rows is None else idx[lo:hi][mine]
            step_losses = self._sgd_step(params, buf, grads, idx)
            if rows is None:
                losses[:, step] = step_losses
            else:
                losses[rows, step] = step_losses
        if rows is not None and n_rows:
            block[rows] = params
            self.m[rows] = buf
        if not trainable.any():
            self._exchange_rows()
            return float("nan")
        everyone = torch.zeros(self.n, cfg.local_steps, device=self.device)
        self._gather_rows(everyone, losses)
        self._exchange_rows()
        sel = to_device(np.flatnonzero(trainable), self.device)
        total = 0.0
        for step in range(cfg.local_steps):
            mean = float(everyone[:, step].contiguous()[sel].mean())
            if self.initial_loss is None and step == 0:
                self.initial_loss = mean
            total += mean
        return total / cfg.local_steps

    def client_accuracies(self) -> np.ndarray:
        correct, samples = self._correct(self.b0, self.b1)
        everyone = torch.zeros(self.n, dtype=torch.int64, device=self.device)
        self._gather_rows(everyone, correct)
        return (everyone.double() / max(1, samples)).cpu().numpy()

    # -------------------------------------------------------------------------------------
    # the run

    def run(self, callback: Callable[[dict], Any] | None = None, *,
            checkpoint_path: str | Path | None = None) -> RunResult:
        """:meth:`Trainer.run` on every rank; ``callback`` runs on rank 0 (elsewhere it is
        ignored) and its decision, with any checkpoint or rewiring it asks for, reaches every
        rank before the next round."""
        leading = self._commanding
        if leading:
            _send(("run",))
        self._commanding = False
        try:
            return super().run(self._round_end(callback), checkpoint_path=checkpoint_path)
        finally:
            self._commanding = leading

    def _round_end(self, callback: Callable[[dict], Any] | None) -> Callable[[dict], Any]:
        if self.rank != 0:
            return self._follow

        def lead_round(row: dict) -> Any:
            self._commanding = True
            try:
                decision = callback(row) if callback is not None else None
            except KeyboardInterrupt:
                _send(("round_end", "interrupt"))
                raise
            except BaseException as exc:
                _send(("round_end", "fail", f"{type(exc).__name__}: {exc}"))
                raise
            finally:
                self._commanding = False
            _send(("round_end", "stop" if decision == "stop" else None))
            return decision
        return lead_round

    def _follow(self, row: dict) -> Any:
        """A rank other than 0 after a round: carry out what rank 0 asks until it says how
        the round ends."""
        while True:
            message = _receive()
            if message[0] != "round_end":
                self._obey(message)
                continue
            if message[1] == "interrupt":
                raise KeyboardInterrupt
            if message[1] == "fail":
                raise _LeaderFailed(message[2])
            return message[1]

    def _interrupted(self, flag: bool) -> bool:
        import torch.distributed as dist

        votes = torch.tensor([int(flag)], dtype=torch.int64)
        dist.all_reduce(votes, op=dist.ReduceOp.MAX)
        return bool(votes.item())

    def _obey(self, message: tuple) -> None:
        op = message[0]
        if op == "save":
            self._write(None)
        elif op == "rewire":
            self._rewire(message[1], message[2])
        elif op == "load":
            import torch.distributed as dist

            box: list[Any] = [None]
            if self.held is None:     # the whole state, sent once to every rank
                dist.broadcast_object_list(box, src=0, device=torch.device("cpu"))
            else:                     # this rank's share of it
                dist.recv_object_list(box, src=0, device=torch.device("cpu"))
            self._restore(box[0], message[1], None)
        elif op == "load_failed":
            raise ExecutionError(message[1])
        else:
            raise ExecutionError(f"unexpected message from rank 0: {op!r}")

    # -------------------------------------------------------------------------------------
    # checkpoints and re-optimisation

    def save(self, path: str | Path | None) -> None:
        """Write the run's state to ``path`` from rank 0 (the momentum gathered from every
        rank): the same file as a single-process run's, so any number of ranks resumes it."""
        if self._commanding:
            _send(("save",))
        self._write(path)

    def _write(self, path: str | Path | None) -> None:
        from .checkpoint import save

        if self.held is not None:
            # split by rows: rank 0 gathers the models, the momentum and the rule's rows
            # (:data:`ROW_STATE`, the difference form's kept models and the per-link counts)
            full = self._gather_to_root(self.x[self.b0:self.b1])
            momentum = self._gather_to_root(self.m)
            mine = self.rule.state()
            rows = {k: self._gather_to_root(v[self.b0:self.b1]) for k, v in mine.items()
                    if self._per_row(k, v)}
            if "missed" in mine:          # every link's count, which every rank keeps
                rows["missed"] = torch.from_numpy(self._missed.copy())
            if "sent" in mine:            # every link's last delivery, which every rank keeps
                rows["sent"] = torch.from_numpy(self._sent.copy())
            if "kept" in mine:            # the kept rounds' centred models of every client
                parts = [self._gather_to_root(v[self.b0:self.b1]) for v in mine["kept"]]
                rows["kept"] = torch.stack(parts) if self.rank == 0 else None
            if self.rank == 0:
                table, block = self.x, self.m
                self.x, self.m = full, momentum
                if rows:
                    self.rule.set_state({**mine, **rows})
                try:
                    save(self, path)
                finally:
                    self.x, self.m = table, block
                    if rows:
                        self.rule.set_state(mine)
            return
        self.gather_models()
        self._sync_rule_state()
        full = torch.empty(self.n, self.d, device=self.device)
        self._gather_rows(full, self.m)
        if self.rank == 0:
            block, self.m = self.m, full
            try:
                save(self, path)
            finally:
                self.m = block

    def _per_row(self, key: str, value: Any, rows: int | None = None) -> bool:
        """Whether the rule's state ``key`` holds one entry per row of the table (of ``rows``
        rows; the table's by default): push-sum's weights, CHOCO's and quantised gossip's
        replicas and the aggregates (:data:`ROW_STATE`), by name, not by shape."""
        return (key in ROW_STATE and isinstance(value, torch.Tensor)
                and value.shape[0] == (self.x.shape[0] if rows is None else rows))

    def _gather_to_root(self, mine: torch.Tensor) -> torch.Tensor | None:
        """Every rank's block of rows (``mine``, in rank order) on rank 0 as one (N x ...)
        tensor (None elsewhere; every rank calls it)."""
        import torch.distributed as dist

        sizes = [hi - lo for lo, hi in self.bounds]
        pad = max(sizes)
        send = torch.zeros(pad, *mine.shape[1:], dtype=mine.dtype, device=mine.device)
        send[:mine.shape[0]] = mine
        if self.rank != 0:
            dist.gather(send, None, dst=0)
            return None
        stack = torch.empty(pad * len(sizes), *mine.shape[1:], dtype=mine.dtype,
                            device=mine.device)
        dist.gather(send, list(stack.split(pad)), dst=0)
        at = 0
        for r, size in enumerate(sizes):       # close the padding's gaps, in rank order
            if at != r * pad:
                stack[at:at + size] = stack[r * pad:r * pad + size].clone()
            at += size
        return stack[:at]

    def _abort_checkpoint(self, path: str | Path | None) -> str:
        if self.rank == 0:
            return super()._abort_checkpoint(path)
        self._write(None)
        return ""

    def load(self, path: str | Path) -> None:
        """Rank 0 reads the checkpoint at ``path`` (checking its owner when
        :attr:`checkpoint_owner` is set) and every rank restores it."""
        from .checkpoint import read

        import torch.distributed as dist

        if self.rank == 0:
            try:
                state = read(path)
                if self.checkpoint_in_tail(state):
                    self._enter_tail_everywhere()
                self._restore(state, str(path), self.checkpoint_owner)
            except AirPlanError as exc:
                _send(("load_failed", str(exc)))
                raise
            _send(("load", str(path)))
            if self.held is None:                      # every rank holds the whole stack
                dist.broadcast_object_list([state], src=0, device=torch.device("cpu"))
                return
            for rank in range(1, self.group.world):    # each rank's share of the state
                dist.send_object_list([self._share_of(state, rank)], dst=rank,
                                      device=torch.device("cpu"))
        else:
            while True:   # a rewiring onto the tail's topology may come first
                message = _receive()
                self._obey(message)
                if message[0] != "rewire":
                    break

    def _enter_tail_everywhere(self) -> None:
        """Rank 0, loading a checkpoint written inside a tail on another topology: every rank
        rewires to it first (:meth:`enter_tail`), whether or not rank 0 commands the others."""
        leading = self._commanding
        self._commanding = True
        try:
            self.enter_tail()
        finally:
            self._commanding = leading

    def _share_of(self, state: dict, rank: int) -> dict:
        """Rank ``rank``'s share of a checkpoint's state: the whole state where the run is not
        split by rows; else its rows of the models and of the rule's per-client state, its
        block's momentum, its links' share of the per-link counts (every link's kept aside, as
        every rank counts them all), and ``held``."""
        if self._split_rows(rank) is None:
            return state
        lo, hi = self.bounds[rank]
        # the clients of that rank's table rows in the round the run goes on with
        nxt = self.link_schedule[int(state["round"]) % len(self.link_schedule)]
        held = LocalLinks(nxt, lo, hi, self._table_rows(rank)).held
        index = torch.from_numpy(held)
        rule = dict(state["rule"])
        per_link = {k: rule[k] for k in ("sent", "missed") if k in rule}
        for key in ROW_STATE:                           # one row per client
            if key in rule:
                rule[key] = rule[key][index]
        if "kept" in rule:                              # rounds x clients x d
            rule["kept"] = rule["kept"][:, index]
        if "sent" in rule:                              # a static topology's links
            recv = self.link_schedule[0].recv
            rule["sent"] = rule["sent"][torch.from_numpy(
                np.flatnonzero((recv >= lo) & (recv < hi)))]
        return {**state, "x": state["x"][index], "m": state["m"][lo:hi], "rule": rule,
                "held": held, "per_link": per_link}

    def _restore(self, state: dict, path: str, owner: dict | None) -> None:
        from .checkpoint import restore

        if "held" in state:                  # this rank's share (:meth:`_share_of`)
            restore(self, state, path, owner, rows=int(self.x.shape[0]))
            if not np.array_equal(state["held"], self._next_rows()):
                raise ExecutionError("the rows rank 0 sent are not the rows this rank holds")
            self._scratch = torch.empty_like(self.x)
            self._g = torch.empty_like(self.m)
            counts = state["per_link"]
            self._missed = counts["missed"].numpy().copy() if "missed" in counts else None
            self._sent = counts["sent"].numpy().copy() if "sent" in counts else None
            return
        restore(self, state, path, owner)
        if self.held is not None:            # the rows this rank holds
            index = to_device(self._next_rows(), self.device)
            self.x = self.x[index]
            self._scratch = torch.empty_like(self.x)
            rule = self.rule.state()
            rows = {k: v[index.to(v.device)] for k, v in rule.items()
                    if self._per_row(k, v, self.n)}
            self._missed = self._sent = None
            if "missed" in rule:
                self._missed = rule["missed"].cpu().numpy().copy()
            if "sent" in rule:            # D-SGD's difference form: this rank's links' share
                self._sent = rule["sent"].cpu().numpy().copy()
                rows["sent"] = torch.from_numpy(self._sent[self._local[0][1].lids].copy())
            if "kept" in rule:
                rows["kept"] = rule["kept"][:, index.to(rule["kept"].device)]
            if rows:
                self.rule.set_state({**rule, **rows})
        self.m = self.m[self.lo:self.hi].clone()
        self._g = torch.empty_like(self.m)

    def rewire(self, topology: Any, k_ratio: float | None = None) -> None:
        if self._commanding:
            _send(("rewire", topology, k_ratio))
        self._rewire(topology, k_ratio)

    def _rewire(self, topology: Any, k_ratio: float | None) -> None:
        """:meth:`Trainer.rewire` with every client's model and rule state on every rank
        first: new links need other rows (a rule that mixes every row may take over). A run
        split by rows holds every row for the rewiring, then the rows the new links need
        (where the new topology is split too)."""
        if self.held is not None:
            rule = self.rule.state()
            rows = {}
            for k, v in rule.items():        # push-sum's weights: every client's
                if self._per_row(k, v):
                    rows[k] = torch.empty(self.n, *v.shape[1:], dtype=v.dtype, device=v.device)
                    self._gather_rows(rows[k], v[self.b0:self.b1])
            if "missed" in rule:
                rows["missed"] = torch.from_numpy(self._missed.copy())
            self.x = self.models()
            self._place(None)
            self._local = []
            self._scratch = torch.empty_like(self.x)
            set_rule_rows(self.rule, self.n)
            self._sent = None
            if isinstance(_inner(self.rule), DSGD):
                _inner(self.rule).live = None      # every link is this rank's again
            if rows:
                self.rule.set_state({**rule, **rows})
        self.gather_models()
        self._sync_rule_state()
        Trainer.rewire(self, topology, k_ratio)
        held = self._split_rows()
        if held is not None:
            self._place(held)
            self._localise(self._table_rows())
            index = self._next_rows()
            self.x = self.x[to_device(index, self.device)]
            self._scratch = torch.empty_like(self.x)
            set_rule_rows(self.rule, int(index.size))
            rule = self.rule.state()
            rows = {k: v[to_device(index, v.device)] for k, v in rule.items()
                    if self._per_row(k, v, self.n)}
            if "missed" in rule:
                self._missed = rule["missed"].cpu().numpy().copy()
            if rows:
                self.rule.set_state({**rule, **rows})
        self._attach()


class _LeaderFailed(ExecutionError):
    """Rank 0's callback failed; rank 0 reports it."""


def lead(w: Any, spec: Any, config: RunConfig) -> DistributedTrainer:
    """On rank 0 of a leader-mode group: send the job to the other ranks and build this
    rank's trainer."""
    from .inputs import trainer_inputs

    group = active()
    if group is None or group.rank != 0:
        raise ExecutionError("only rank 0 of a distributed run leads it")
    _send(("job", w, spec, config))
    return DistributedTrainer(config, *trainer_inputs(w, spec), group=group, leader=True)


def serve() -> None:
    """Ranks other than 0 in leader mode: build, run and checkpoint the trainers rank 0 asks
    for, until it says ``exit``. An error that rank 0 meets as well (a refused configuration,
    a failed callback) is reported by rank 0; this rank waits for its next job."""
    from .inputs import trainer_inputs

    trainer: DistributedTrainer | None = None
    while True:
        message = _receive()
        op = message[0]
        try:
            if op == "exit":
                return
            if op == "job":
                trainer = None
                _, w, spec, config = message
                trainer = DistributedTrainer(config, *trainer_inputs(w, spec), leader=True)
            elif trainer is None:
                continue        # the job failed to build here as on rank 0
            elif op == "run":
                trainer.run()
            else:
                trainer._obey(message)
        except (AirPlanError, KeyboardInterrupt):
            continue


#: What gloo says when the process at the other end of a connection is gone.
_PEER_GONE = ("closed by peer", "reset by peer", "Broken pipe")


def main(command: Callable[[], int]) -> int:
    """Run a CLI ``command`` under a launcher: join the group; rank 0 runs the command and
    then releases the others, which serve it meanwhile; every rank leaves the group. A rank
    that loses rank 0 mid-run (rank 0 killed, or stopped at once by a second Ctrl-C) says so in
    one line instead of the traceback of the message it was waiting for."""
    group = init()
    try:
        if group.rank == 0:
            try:
                return command()
            finally:
                _send(("exit",))
        try:
            serve()
        except RuntimeError as exc:
            if not any(text in str(exc) for text in _PEER_GONE):
                raise
            print(f"airplan: rank {group.rank}: rank 0 left the run before it ended (see its "
                  f"output for why)", file=sys.stderr)
            return 1
        return 0
    finally:
        shutdown()
