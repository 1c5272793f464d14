"""The execution engine: N clients as one stacked (N x d) tensor, trained and gossiped per round.

A :class:`Trainer` takes a frozen :class:`RunConfig`, a dataset, a partition and a built topology.
Each round: draw dropout and fading (channel generator), run ``local_steps`` momentum-SGD steps on
every online client (data generator for the minibatches), communicate with the chosen rule
(:mod:`.gossip`; the training generator draws the shared sparsification masks), then measure.
:meth:`Trainer.run` returns a :class:`RunResult`; every round yields one dict with exactly the
keys of :data:`ROUND_KEYS` (the catalog's ``round_stats`` columns), passed to an optional
callback that may answer ``"stop"``.

Seeds: ``data_seed`` (minibatches, evaluation subset), ``train_seed`` (model initialisation,
shared masks), ``channel_seed`` (dropout, fading, noise) drive separate generators, so changing
one stream leaves the others untouched; all of their states are checkpointed.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import attrs
import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ExecutionError, ValidationError
from .channel import Channel, RoundLinks, Traffic, dbm_to_watt
from .clique_averaging import CliqueAveraging, clique_averaging_enabled
from .compression import MASKS, k_from_ratio
from .device import DEFAULT_DEVICE, check_device, device_name, resolve_device, to_device
from .flat import STRATEGIES, GradientEngine, ParamLayout, chunks, client_correct, has_conv, \
    resolve_strategy, single_logits
from .digital import TRANSPORTS, Digital
from .federated import FEDERATED, Federated
from .gradient_tracking import OTA_REFUSAL, GradientTracking
from .dllr_oa import DLLR_BETA_NOISE, DLLR_SIGMA, DLLROA, LAYER_MASKS, ORDERS
from .matcha import Matcha
from .push_sum import PushSum
from .gossip import ALGORITHMS, DSGD, OTA_PAYLOADS, Choco, Exchange, PaperLiteral, \
    check_schedule, difference_decay, link_schedule, round_traffic
from ..plans.channel_config import CHANNEL_PARAMS, IDEAL_CHANNEL, ChannelConfig, number_in
from ..plans.operators import MATCHA_BUDGET, MIXING_ONLY, check_mix_on, check_mixing_tail
from ..plans.sla import TARGET_METRICS, first_crossing
from ..plans.topology import TopologySpec, build
from .metrics import consensus_distance, consensus_exploded, diverged, jain_index, \
    stuck_after_explosion
from ..model_size import MODELS, build_model

__all__ = [
    "PAPER_LITERAL_WARNING",
    "ROUND_KEYS",
    "RunConfig",
    "RunResult",
    "Trainer",
    "default_gamma",
]

#: Keys of every per-round dict, in order (they map to the catalog's round_stats columns).
ROUND_KEYS = (
    "round", "test_accuracy", "client_acc_mean", "client_acc_min", "train_loss",
    "consensus_distance", "channel_uses", "slots", "energy_j", "bits", "link_drop_rate",
    "dropout_rate", "wall_time_s",
)

PAPER_LITERAL_WARNING = (
    "algorithm 'paper_literal' reproduces the paper's update w <- w^{t+1/2} + gamma * y, which "
    "adds the neighbours' (sparsified) steps instead of averaging models; clients do not reach "
    "consensus and may diverge. Use 'dsgd' or 'choco' for real runs."
)

STATUSES = ("succeeded", "failed", "aborted")

#: FedProx's proximal weight mu when none is given (Li et al. 2020 tuned mu in
#: {0.001, 0.01, 0.1, 1}).
FEDPROX_MU = 0.01

_EVAL_SAMPLES = 512
_EVAL_CLIENTS = 16
#: Clients per evaluation chunk of a model with convolutions on the CPU: one grouped
#: convolution over many clients' channels is slower there than a plain one per client on the
#: evaluation's large batches (cnn1d on mnist1d's 2000 evaluation samples, N = 40, one thread:
#: 0.21-0.30 s a round in chunks of 16 clients, 0.13-0.15 s one client at a time;
#: ``benchmarks/bench_eval_chunk.py``). Training's small batches keep the grouped convolution.
_EVAL_CLIENTS_CPU_CONV = 1


def default_gamma(k_ratio: float, mask: str = "common_randk") -> float:
    """Consensus step of CHOCO (and paper_literal) when ``gamma`` is not given.

    1 for k = 1 (CHOCO then equals D-SGD). With a common random-k mask a coordinate's public
    copy is refreshed only every ~d/k rounds while the consensus step keeps using it, which
    overshoots unless gamma is about k/d or less (measured on digits, ring N = 10: stable and
    best at gamma ~ k/d to 2k/d, unstable from ~1.5-2 k/d/lambda_max(I - W)), so gamma = k/d.
    Top-k captures most of the difference's energy and tolerates more: min(0.5, 20 k/d)
    (best or near-best for k/d in {0.01, 0.05, 0.1, 0.3} in the same sweep).
    """
    k_ratio = float(k_ratio)
    if k_ratio >= 1.0:
        return 1.0
    if mask == "topk":
        return min(0.5, 20.0 * k_ratio)
    return k_ratio


def _positive_int(name: str):
    def check(_inst: Any, _attr: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValidationError(f"{name} must be a positive integer, got {value!r}")
    return check


def _seed(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValidationError(f"{attr.name} must be a non-negative integer, got {value!r}")


def _choice(options: tuple[str, ...]):
    def check(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
        if value not in options:
            raise ValidationError(
                f"{attr.name} must be one of {', '.join(options)}, got {value!r}"
            )
    return check


def _finite(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
            hi_open: bool = False):
    """:func:`~..plans.channel_config.number_in`, and None where the field's default is None."""
    number = number_in(lo, hi, lo_open=lo_open, hi_open=hi_open)

    def check(inst: Any, attr: attrs.Attribute, value: Any) -> None:
        if value is None and attr.default is None:
            return
        number(inst, attr, value)
    return check


def _channel_config(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, ChannelConfig):
        raise ValidationError(f"channel must be a ChannelConfig (e.g. ChannelConfig(kind='ota', "
                              f"snr_db=10)), got {value!r}")


def _model_name(_inst: Any, _attr: Any, value: Any) -> None:
    MODELS.get(value)


@attrs.frozen
class RunConfig:
    """Everything that determines a run (with the dataset, partition and topology).

    ``algorithm='auto'`` means ``dsgd`` for ``k_ratio == 1`` and ``choco`` below; ``gamma=None``
    means :func:`default_gamma`. ``client_eval_samples`` caps the test samples used for the
    per-client accuracies (the average model always uses the whole test set); ``None`` = all.
    ``divergence_factor``: a round whose training loss exceeds this multiple of the first
    minibatch loss (or is not finite) fails the run; :mod:`.metrics` adds the other divergence
    checks (consensus distance, a loss explosion followed by accuracy at chance).
    ``device``: ``cpu`` (default), ``cuda``, ``cuda:N`` or ``auto`` (:mod:`.device`); it decides
    where the arithmetic runs, not what is computed, so a checkpoint may resume on another.
    """

    model: str = attrs.field(default="mlp", validator=_model_name)
    lr: float = attrs.field(default=0.05, validator=_finite(0.0, lo_open=True))
    momentum: float = attrs.field(default=0.9, validator=_finite(0.0, 1.0, hi_open=True))
    batch_size: int = attrs.field(default=32, validator=_positive_int("batch_size"))
    local_steps: int = attrs.field(default=1, validator=_positive_int("local_steps"))
    rounds: int = attrs.field(default=100, validator=_positive_int("rounds"))
    k_ratio: float = attrs.field(default=1.0, validator=_finite(0.0, 1.0, lo_open=True))
    algorithm: str = attrs.field(default="auto", validator=_choice(ALGORITHMS))
    mask: str = attrs.field(default="common_randk", validator=_choice(MASKS))
    error_feedback: bool = False
    gamma: float | None = attrs.field(default=None, validator=_finite(0.0, lo_open=True))
    channel: ChannelConfig = attrs.field(default=IDEAL_CHANNEL, validator=_channel_config)
    ota_payload: str = attrs.field(default="difference", validator=_choice(OTA_PAYLOADS))
    data_seed: int = attrs.field(default=0, validator=_seed)
    train_seed: int = attrs.field(default=0, validator=_seed)
    channel_seed: int = attrs.field(default=0, validator=_seed)
    target_accuracy: float | None = attrs.field(default=None, validator=_finite(0.0, 1.0))
    target_metric: str = attrs.field(default="accuracy", validator=_choice(tuple(TARGET_METRICS)))
    eval_every: int = attrs.field(default=1, validator=_positive_int("eval_every"))
    threads: int = attrs.field(default=1, validator=_positive_int("threads"))
    strategy: str = attrs.field(default="auto", validator=_choice(STRATEGIES))
    weight_decay: float = attrs.field(default=0.0, validator=_finite(0.0))
    client_eval_samples: int | None = attrs.field(default=2000)
    divergence_factor: float = attrs.field(default=1e3, validator=_finite(1.0, lo_open=True))
    device: str = attrs.field(default=DEFAULT_DEVICE, converter=check_device)
    transport: str = attrs.field(default="ota", validator=_choice(TRANSPORTS))
    bits: int = attrs.field(default=32)
    prox_mu: float | None = attrs.field(default=None, validator=_finite(0.0))
    matcha_budget: float = attrs.field(default=MATCHA_BUDGET,
                                       validator=_finite(0.0, 1.0, lo_open=True))
    #: DLLR-OA (:mod:`.dllr_oa`): how a receiver picks its tensors, the fixed noise standard
    #: deviation (None: the plan's channel), the receivers' order and the power-estimate noise
    dllr_mask: str = attrs.field(default="random", validator=_choice(LAYER_MASKS))
    dllr_sigma: float | None = attrs.field(
        default=DLLR_SIGMA, validator=attrs.validators.optional(number_in(0.0)))
    dllr_order: str = attrs.field(default="gauss_seidel", validator=_choice(ORDERS))
    dllr_beta_noise: float = attrs.field(default=DLLR_BETA_NOISE, validator=_finite(0.0))
    #: The last ``mix_rounds`` rounds of the budget only mix (:meth:`Trainer.step` with
    #: ``train=False``): the plan's mixing-only tail (docs/runtime.md, Mixing-only rounds).
    mix_rounds: int = attrs.field(default=0)
    #: Where the tail mixes: None, the run's own topology; ``"complete"``, the complete graph
    #: (the trainer rewires to it when the tail starts; D-SGD only).
    mix_on: str | None = None

    def __attrs_post_init__(self) -> None:
        m = self.mix_rounds
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) \
                or not 0 <= m < self.rounds:
            raise ValidationError(f"mix_rounds must be an integer in 0..rounds - 1 = "
                                  f"{self.rounds - 1}, got {self.mix_rounds!r}")
        check_mixing_tail(self.resolved_algorithm, self.mix_rounds)
        object.__setattr__(self, "mix_on", check_mix_on(self.mix_on, self.resolved_algorithm,
                                                        self.mix_rounds))
        if self.client_eval_samples is not None:
            _positive_int("client_eval_samples")(self, None, self.client_eval_samples)
        if isinstance(self.bits, bool) or not isinstance(self.bits, (int, np.integer)) \
                or not 1 <= self.bits <= 32:
            raise ValidationError(f"bits must be an integer in 1..32, got {self.bits!r}")
        algorithm = self.resolved_algorithm
        if algorithm in FEDERATED + ("gradient_tracking", "push_sum", "matcha") \
                and self.k_ratio < 1.0:
            raise ValidationError(
                f"{algorithm} sends whole models (k_ratio = 1); k_ratio = {self.k_ratio} needs "
                f"algorithm 'choco' (or 'auto')")
        if algorithm == "gradient_tracking":
            if self.channel.kind == "ota" and self.transport == "ota":
                raise ValidationError(OTA_REFUSAL)
            if self.local_steps != 1:
                raise ValidationError(
                    f"gradient_tracking takes one gradient per round (local_steps = 1), got "
                    f"local_steps = {self.local_steps}")
        if algorithm == "push_sum" and self.transport == "digital" and self.bits < 32:
            raise ValidationError(
                f"push_sum over the digital transport sends exact float32 packets (bits = 32); "
                f"bits = {self.bits} is not built for it")
        if self.prox_mu is not None and self.prox_mu and algorithm != "fedprox":
            raise ValidationError(
                f"prox_mu = {self.prox_mu} is FedProx's proximal weight; algorithm {algorithm} "
                f"has no proximal term (use algorithm 'fedprox')")
        if algorithm == "dllr_oa" and self.transport != "ota":
            raise ValidationError("dllr_oa aggregates over the air; it has no digital form: use "
                                  "transport 'ota'")
        if self.transport == "digital" and algorithm in ("choco", "paper_literal"):
            raise ValidationError(
                f"the digital transport sends whole (quantised) models; {algorithm} "
                f"(k_ratio = {self.k_ratio}) runs over the air only: use transport 'ota'")
        if algorithm == "dsgd" and self.k_ratio < 1.0:
            raise ValidationError(
                f"dsgd transmits whole models (k_ratio = 1); k_ratio = {self.k_ratio} needs "
                f"algorithm 'choco' (or 'auto')"
            )
        if self.error_feedback and algorithm != "paper_literal":
            raise ValidationError(
                f"error_feedback applies to 'paper_literal' only: {algorithm} "
                + ("already carries the compression residual in its public copies"
                   if algorithm == "choco" else "does not compress")
            )

    @property
    def resolved_algorithm(self) -> str:
        if self.algorithm == "auto":
            return "dsgd" if self.k_ratio >= 1.0 else "choco"
        return self.algorithm

    @property
    def resolved_prox_mu(self) -> float:
        """FedProx's proximal weight: ``prox_mu``, else :data:`FEDPROX_MU` for fedprox (0 for
        every other algorithm)."""
        if self.resolved_algorithm != "fedprox":
            return 0.0
        return FEDPROX_MU if self.prox_mu is None else float(self.prox_mu)

    @property
    def resolved_gamma(self) -> float:
        return (float(self.gamma) if self.gamma is not None
                else default_gamma(self.k_ratio, self.mask))

    def as_dict(self) -> dict[str, Any]:
        """Plain-Python dict of every field (JSON- and checkpoint-safe), the channel's settings
        flat (:meth:`.ChannelConfig.flat`: ``channel`` names the kind): the form executions'
        options and checkpoints store."""
        out = attrs.asdict(self, filter=lambda a, v: a.name != "channel"
                           and not (a.name == "mix_rounds" and v == 0)
                           and not (a.name == "mix_on" and v is None))
        return {**out, **self.channel.flat()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "RunConfig":
        """The configuration of flat fields, the form :meth:`as_dict` writes (executions'
        options and checkpoints written before the channel became one value have it too); a
        channel setting left out is that of the default channel, :data:`IDEAL_CHANNEL`. The
        channel may also be given whole, as a ``ChannelConfig`` or its ``attrs.asdict``."""
        rest = {k: v for k, v in values.items() if k != "channel" and k not in CHANNEL_PARAMS}
        channel = values.get("channel")
        if isinstance(channel, (ChannelConfig, dict)):
            flat = sorted(set(values) & set(CHANNEL_PARAMS))
            if flat:
                raise ValidationError(f"the channel is given whole and as {', '.join(flat)}; "
                                      f"give it one way")
            if isinstance(channel, dict):
                channel = ChannelConfig(**channel)
            return cls(channel=channel, **rest)
        return cls(channel=ChannelConfig.from_flat(values, base=IDEAL_CHANNEL), **rest)


@attrs.frozen
class RunResult:
    """Outcome of :meth:`Trainer.run` (maps to the catalog's ``executions`` row)."""

    status: str
    reason: str | None
    rounds: int
    rounds_to_target: int | None
    final_accuracy: float | None
    final_loss: float | None
    client_accuracies: tuple[float, ...]
    client_acc_mean: float | None
    client_acc_var: float | None
    jain_fairness: float | None
    total_channel_uses: float
    total_energy_j: float
    total_bits: float
    total_slots: float
    history: tuple[dict, ...] = attrs.field(repr=False)
    algorithm: str = ""
    strategy: str = ""
    warnings: tuple[str, ...] = ()
    checkpoint_path: str | None = None
    seeds: dict = attrs.field(factory=dict)
    device: str = DEFAULT_DEVICE


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``n`` intra-op torch threads, restoring the previous count after."""
    old = torch.get_num_threads()
    if old != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != old:
            torch.set_num_threads(old)


class _InterruptGuard:
    """Defers the first SIGINT to the end of the current round (main thread only); a second
    SIGINT interrupts at once."""

    def __init__(self) -> None:
        self.interrupted = False
        self._old: Any = None

    def __enter__(self) -> "_InterruptGuard":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class Trainer:
    """Runs one plan: ``Trainer(config, dataset, partition, topology).run(callback)``."""

    def __init__(self, config: RunConfig, dataset: Any, partition: Any, topology: Any):
        if not isinstance(config, RunConfig):
            raise ValidationError(f"config must be a RunConfig, got {type(config).__name__}")
        self.config = config
        self.dataset = dataset
        n = topology.graph.number_of_nodes()
        if partition.n_clients != n:
            raise ExecutionError(
                f"partition has {partition.n_clients} clients but the topology has {n} nodes"
            )
        if partition.n_samples != dataset.n_train:
            raise ExecutionError(
                f"partition covers {partition.n_samples} samples but the dataset has "
                f"{dataset.n_train} training samples"
            )
        self.n = n
        self.topology = topology
        #: Where the stacked state and the arithmetic live (``config.device`` resolved on this
        #: machine); the numpy draws (minibatches, dropout, fading) stay on the CPU.
        self.device = resolve_device(config.device)
        #: One link set per round of the topology's period (one for a static topology): round
        #: t (0-based) mixes over ``link_schedule[t % period]``; ``links`` is the current one.
        self.link_schedule = link_schedule(topology, self.device)
        self.links = self.link_schedule[0]
        self.clique_averaging = (CliqueAveraging(topology, self.links)
                                 if clique_averaging_enabled(topology) else None)
        self.algorithm = config.resolved_algorithm
        self._check_clique_averaging(self.clique_averaging is not None)
        check_schedule(self.algorithm, config.mask, len(self.link_schedule))
        self.gamma = config.resolved_gamma
        self.warnings: tuple[str, ...] = ()
        if self.algorithm == "paper_literal":
            self.warnings = (PAPER_LITERAL_WARNING,)
            warnings.warn(PAPER_LITERAL_WARNING, RuntimeWarning, stacklevel=2)

        with torch_threads(config.threads), torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.train_seed)
            self.model = build_model(config.model, dataset.input_shape, dataset.n_classes)
        self.model.requires_grad_(False)
        # built on the CPU from the CPU seed, then moved: every device starts from the same model
        self.model.to(self.device)
        self.layout = ParamLayout(self.model)
        self.d = self.layout.d
        self.k = k_from_ratio(config.k_ratio, self.d)
        self.strategy = resolve_strategy(config.strategy, self.model, dataset.input_shape,
                                         self.device.type == "cuda")
        self._grad = GradientEngine(self.model, self.layout, self.strategy)

        x0 = self.layout.flatten(self.model)
        #: The initial model's norm: the scale a diverging consensus distance is measured by.
        self.model_scale = float(torch.linalg.vector_norm(x0.double().cpu()))
        # the rows this process holds: all N here; a block and the rows it mixes with on one
        # rank of a run split by rows (:mod:`.distributed`, :mod:`.row_split`)
        self.x = x0.unsqueeze(0).repeat(self._rows_held(), 1)
        # the rows this process trains (all of them here; a block of them on one rank of a
        # distributed run, :mod:`.distributed`): momentum, gradients and batches cover those
        rows = self._trained_rows()
        self.m = torch.zeros(rows, self.d, device=self.device)
        self._g = torch.empty(rows, self.d, device=self.device)
        # persistent buffers: allocating (N x d) tensors every round costs page faults that
        # outweigh the arithmetic for large d
        self._scratch = torch.empty_like(self.x)
        self._batch_x = torch.empty(rows * config.batch_size, *dataset.input_shape,
                                    device=self.device)
        self._batch_y = torch.empty(rows * config.batch_size, dtype=torch.int64,
                                    device=self.device)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only arrays, never written
            self.x_train = to_device(dataset.x_train, self.device)
            self.y_train = to_device(dataset.y_train, self.device)
            self.x_test = to_device(dataset.x_test, self.device)
            self.y_test = to_device(dataset.y_test, self.device)
        sizes = np.array([len(ix) for ix in partition.indices], dtype=np.int64)
        self.sizes = sizes
        self.has_data = sizes > 0
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.flat_index = (np.concatenate(partition.indices).astype(np.int64) if sizes.sum()
                           else np.zeros(1, np.int64))

        self.data_rng = np.random.default_rng(config.data_seed)
        # on the CPU whatever the device: the shared masks (d-element permutations, ~2 ms at
        # d = 200k) are the same draws on every device, and resume across devices keeps them
        self.train_gen = torch.Generator().manual_seed(config.train_seed)
        self.channel = Channel.of(config.channel, seed=config.channel_seed, device=self.device)
        eval_rng = np.random.default_rng([config.data_seed, 1])
        n_test = dataset.n_test
        cap = config.client_eval_samples
        self.eval_index = (to_device(np.sort(eval_rng.choice(n_test, cap, replace=False)),
                                     self.device)
                           if cap is not None and cap < n_test else None)

        if self.algorithm in FEDERATED:
            self.rule: Any = Federated(self.algorithm, n, self.d, sizes, config.transport,
                                       config.bits, config.resolved_prox_mu)
        elif self.algorithm == "matcha":
            if len(self.link_schedule) > 1:
                raise ExecutionError(
                    f"matcha samples matchings of one static graph; topology "
                    f"'{topology.spec.family}' changes every round (period "
                    f"{len(self.link_schedule)})")
            held = self.x.shape[0]
            inner = (Digital(held, self.d, config.bits, x0, config.gamma)
                     if config.transport == "digital"
                     else DSGD(held, self.d, x0=x0, payload=config.ota_payload, decay=0.0))
            self.rule = Matcha(inner, topology, config.matcha_budget, self.device)
            self.link_schedule = (self.rule.links,)
            self.links = self.rule.links
        elif self.algorithm == "dllr_oa":
            self.rule = DLLROA(n, self.layout.offsets, self.layout.numels, config.k_ratio,
                               config.dllr_mask, config.dllr_sigma, config.dllr_order,
                               beta_noise=config.dllr_beta_noise)
        elif self.algorithm == "push_sum":
            self.rule = PushSum(self.x.shape[0], self.d, config.transport, device=self.device)
        elif self.algorithm == "gradient_tracking":
            self.rule = GradientTracking(n, self.d, x0, config.transport, config.bits,
                                         config.gamma)
        elif self.algorithm == "dsgd" and config.transport == "digital":
            self.rule = Digital(self.x.shape[0], self.d, config.bits, x0, config.gamma)
        elif self.algorithm == "dsgd":
            self.rule = self._dsgd(x0)
        elif self.algorithm == "choco":
            self.rule = Choco(self.x.shape[0], self.d, self.k, config.mask, self.gamma, x0)
        else:
            self.rule = PaperLiteral(n, self.d, self.k, config.mask, self.gamma,
                                     config.error_feedback, device=self.device)

        self.round = 0
        self.history: list[dict] = []
        self.initial_loss: float | None = None
        self.rounds_to_target: int | None = None
        self.failure: str | None = None
        self.last_eval_round = -1
        self.client_acc: np.ndarray | None = None
        self.test_accuracy: float | None = None
        self._in_round = False
        #: FedProx's anchor x^t for the rows being trained (None: no proximal term)
        self._anchor: torch.Tensor | None = None
        #: push-sum's per-row learning-rate factor 1 / w_i for the rows being trained
        self._lr_scale: torch.Tensor | None = None
        #: Written into every checkpoint and checked on load when set: the catalog's identity
        #: and the execution id (``{"catalog_id": ..., "exec_id": ...}``) the run belongs to.
        self.checkpoint_owner: dict[str, Any] | None = None

    # ---------------------------------------------------------------------------------------
    # one round

    def _trained_rows(self) -> int:
        """How many clients' rows this process trains (all N in a single process)."""
        return self.n

    def _rows_held(self) -> int:
        """How many clients' rows this process holds in ``x`` (all N in a single process);
        the rules a run split by rows applies (D-SGD, digital, MATCHA, push-sum, CHOCO) are
        built for that many rows."""
        return self.n

    def _finite(self) -> bool:
        """Whether every client's model is finite."""
        return bool(torch.isfinite(self.x).all())

    def _mix(self, links: RoundLinks, x_prev: torch.Tensor | None) -> Exchange:
        """The update rule's round on the half-step models (``links``: the round's draws);
        ``self.x`` then holds the mixed models. Returns the rule's :class:`~.gossip.Exchange`,
        which the round's traffic is counted from."""
        cfg = self.config
        result = self.rule.communicate(self.x, self.links, links, self.channel,
                                       train_gen=self.train_gen, x_prev=x_prev,
                                       scratch=self._scratch,
                                       tx_power_w=dbm_to_watt(cfg.channel.tx_power_dbm),
                                       bandwidth_hz=cfg.channel.bandwidth_hz)
        if result.x is not self.x:     # the rule mixed into the scratch buffer: swap
            self._scratch, self.x = self.x, result.x
        return result

    def _interrupted(self, flag: bool) -> bool:
        """Whether the run stops for an interrupt after this round (this process's Ctrl-C;
        a distributed run agrees on it across its processes)."""
        return flag

    def _consensus(self) -> float:
        """The round's consensus distance (:func:`.metrics.consensus_distance`; a run over
        several processes computes it from its blocks, with the same result)."""
        return consensus_distance(self.x, self._scratch)

    def _sample(self) -> np.ndarray:
        """(N, batch) train indices, uniform with replacement from each client's partition."""
        u = self.data_rng.random((self.n, self.config.batch_size))
        pos = np.floor(u * np.maximum(self.sizes, 1)[:, None]).astype(np.int64)
        return self.flat_index[np.minimum(self.offsets[:, None] + pos, self.flat_index.size - 1)]

    def _local_train(self, trainable: np.ndarray) -> float:
        cfg = self.config
        every = bool(trainable.all())
        rows = None if every else to_device(np.flatnonzero(trainable), self.device)
        n_rows = self.n if rows is None else int(rows.numel())
        params = self.x if rows is None else self.x[rows]
        buf = self.m if rows is None else self.m[rows]
        grads = self._g[:n_rows]
        self._local_options(slice(0, self.n), rows)
        total = 0.0
        for step in range(cfg.local_steps):
            idx = self._sample()
            if n_rows == 0:
                continue
            if rows is not None:
                idx = idx[trainable]
            losses = self._sgd_step(params, buf, grads, idx)
            mean = float(losses.mean())
            if self.initial_loss is None and step == 0:
                self.initial_loss = mean
            total += mean
        if rows is not None and n_rows:
            self.x[rows] = params
            self.m[rows] = buf
        return total / cfg.local_steps if n_rows else float("nan")

    def _local_options(self, block: slice, rows: torch.Tensor | None) -> None:
        """Restrict the per-client options of the local steps to the clients trained: the
        ``block`` of rows this process holds, and of those ``rows`` (all when None):
        FedProx's anchor x^t and push-sum's learning-rate factors 1 / w_i."""
        anchor = self._anchor
        if anchor is not None:
            anchor = anchor[block] if rows is None else anchor[block][rows]
        factor = getattr(self.rule, "lr_scale", None)
        if factor is not None:
            factor = factor()[block] if rows is None else factor()[block][rows]
        self._anchor, self._lr_scale = anchor, factor

    def _sgd_step(self, params: torch.Tensor, buf: torch.Tensor, grads: torch.Tensor,
                  idx: np.ndarray) -> torch.Tensor:
        """One momentum-SGD step of the clients whose rows are ``params`` (momentum ``buf``,
        gradient buffer ``grads``) on their minibatch indices ``idx`` (rows x batch); returns
        each client's minibatch loss."""
        cfg = self.config
        losses = self._minibatch_gradient(params, grads, idx)
        if self._anchor is not None:       # FedProx: + mu (x_i - x^t)
            grads.add_(params - self._anchor, alpha=self.rule.prox_mu)
        torch.add(grads, buf, alpha=cfg.momentum, out=buf)   # buf = momentum * buf + g
        if self._lr_scale is None:
            params.add_(buf, alpha=-cfg.lr)
        else:                              # push-sum: a step of x is a step / w_i of z
            params.addcmul_(buf, self._lr_scale, value=-cfg.lr)
        return losses

    def _minibatch_gradient(self, params: torch.Tensor, grads: torch.Tensor,
                            idx: np.ndarray) -> torch.Tensor:
        """Each row's minibatch gradient (plus weight decay) at ``params`` into ``grads``, on
        its minibatch indices ``idx`` (rows x batch); returns each row's minibatch loss."""
        cfg = self.config
        n_rows = params.shape[0]
        # index_select: ~4x faster than x[idx2d]
        it = to_device(idx.reshape(-1), self.device)
        m = it.numel()
        xb = torch.index_select(self.x_train, 0, it, out=self._batch_x[:m]).view(
            n_rows, cfg.batch_size, *self.x_train.shape[1:])
        yb = torch.index_select(self.y_train, 0, it, out=self._batch_y[:m]).view(
            n_rows, cfg.batch_size)
        losses = self._grad(params, xb, yb, grads)
        if cfg.weight_decay:
            grads.add_(params, alpha=cfg.weight_decay)
        return losses

    def _gradient(self, x: torch.Tensor, trainable: np.ndarray
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Minibatch gradients of the ``trainable`` clients at their rows of ``x`` (one draw of
        every client's minibatch, as a local step takes): (gradients of those rows, their
        losses), or (None, None) when no client trains."""
        idx = self._sample()
        rows = np.flatnonzero(trainable)
        if not rows.size:
            return None, None
        params = x if rows.size == self.n else x[to_device(rows, self.device)]
        grads = self._g[:rows.size]
        losses = self._minibatch_gradient(params, grads, idx[rows])
        return grads, losses

    def step(self, train: bool = True) -> dict:
        """Run one round and return its dict (keys :data:`ROUND_KEYS`).

        ``train=False`` runs a *mixing-only* round: nobody takes a local step (the models,
        momentum buffers and the round's minibatch draws are left as a training round with
        every client offline would leave them) and the rule exchanges and mixes the models
        as in any round, over the same channel and at the same cost. A few such rounds at
        the end of a run draw the clients' models together (docs/runtime.md, Mixing-only
        rounds). Only the rules that mix the models themselves run them (:data:`MIXING_ONLY`):
        gradient tracking's exchange carries gradient trackers, and FedAvg, FedProx,
        paper_literal and DLLR-OA send the round's update, which is zero without local steps."""
        if self.failure is not None:
            raise ExecutionError(f"run already failed: {self.failure}")
        if not train and self.algorithm not in MIXING_ONLY:
            raise ExecutionError(
                f"{self.algorithm} cannot run a mixing-only round: "
                + ("its exchange carries gradient trackers, which need local steps"
                   if self.algorithm == "gradient_tracking" else
                   "it sends the round's update, which is zero when nobody trains")
                + f"; the rules that can: {', '.join(MIXING_ONLY)}")
        cfg = self.config
        start = time.perf_counter()
        self._in_round = True
        with torch_threads(cfg.threads):
            self.links = self.link_schedule[self.round % len(self.link_schedule)]
            draw = getattr(self.rule, "draw", None)
            links = (draw(self.channel, self.links) if draw is not None
                     else self.channel.draw(self.n, self.links.u, self.links.v))
            trainable = links.active & self.has_data & train
            x_prev = self.x.clone() if self.algorithm == "paper_literal" \
                or self.clique_averaging is not None \
                or getattr(self.rule, "needs_prev", False) else None
            self._anchor = x_prev if getattr(self.rule, "prox_mu", 0.0) else None
            ca = None
            if self.algorithm == "gradient_tracking":
                result, self.x, loss, first = self.rule.round(
                    self.x, self.m, self.links, links, self.channel, self._gradient,
                    trainable, cfg.lr, cfg.momentum)
                if self.initial_loss is None:
                    self.initial_loss = first if first is not None else loss
                loss = float("nan") if loss is None else loss
            else:
                loss = self._local_train(trainable)
                if self.clique_averaging is not None:
                    ca = self.clique_averaging.apply(
                        self.x, x_prev, links, self.channel, trainable, cfg.channel.tx_power_dbm,
                        cfg.channel.bandwidth_hz, getattr(self.rule, "shrinkage", True))
                result = self._mix(links, x_prev)
            cost = round_traffic(result, self.links, self.d, dbm_to_watt(cfg.channel.tx_power_dbm),
                                 cfg.channel.bandwidth_hz, self.channel.snr)
            if ca is not None:
                cost = Traffic(cost.channel_uses + ca.channel_uses, cost.slots + ca.slots,
                               cost.energy_j + ca.energy_j, cost.bits + ca.bits)
            consensus = self._consensus()
            r = self.round + 1
            self.round = r
            trained = bool(trainable.any())
            reason = diverged(loss, self.initial_loss, cfg.divergence_factor) if trained \
                else None
            if reason is None:
                reason = consensus_exploded(consensus, self.model_scale, r)
            test_acc = acc_mean = acc_min = None
            if reason is None and (r % cfg.eval_every == 0 or r == cfg.rounds):
                test_acc, client_acc = self._evaluate()
                acc_mean, acc_min = float(client_acc.mean()), float(client_acc.min())
            if cfg.target_accuracy is not None and self.rounds_to_target is None \
                    and (test_acc is not None or r == cfg.rounds):
                key = TARGET_METRICS[cfg.target_metric]
                now = {"test_accuracy": test_acc, "client_acc_mean": acc_mean}[key]
                points = [(h["round"], h[key]) for h in self.history] + [(r, now)]
                self.rounds_to_target = first_crossing(points, cfg.target_accuracy,
                                                       complete=r == cfg.rounds)
        row = {
            "round": r,
            "test_accuracy": test_acc,
            "client_acc_mean": acc_mean,
            "client_acc_min": acc_min,
            "train_loss": loss if trained else None,
            "consensus_distance": consensus,
            "channel_uses": cost.channel_uses,
            "slots": float(cost.slots),
            "energy_j": cost.energy_j,
            "bits": cost.bits,
            "link_drop_rate": links.link_drop_rate,
            "dropout_rate": links.dropout_rate,
            "wall_time_s": time.perf_counter() - start,
        }
        if reason is None and test_acc is not None:
            reason = stuck_after_explosion(self.history + [row], self.initial_loss,
                                           self.dataset.n_classes)
        self.failure = reason
        self.history.append(row)
        self._in_round = False
        return dict(row)

    # ---------------------------------------------------------------------------------------
    # evaluation

    def average_model(self) -> torch.Tensor:
        """The mean of the client models, flat (d,) (a copy)."""
        return self.x.mean(dim=0)

    def _accuracy(self, flat: torch.Tensor) -> float:
        correct = 0
        for sl in chunks(self.dataset.n_test, 4 * _EVAL_SAMPLES):
            logits = single_logits(self.model, self.layout, flat, self.x_test[sl])
            correct += int((logits.argmax(dim=1) == self.y_test[sl]).sum())
        return correct / max(1, self.dataset.n_test)

    def client_accuracies(self) -> np.ndarray:
        """Each client's accuracy on the evaluation subset of the test set, shape (N,)."""
        correct, samples = self._correct(0, self.n)
        return (correct.double() / max(1, samples)).cpu().numpy()

    def _correct(self, lo: int, hi: int) -> tuple[torch.Tensor, int]:
        """Correct predictions of clients lo..hi-1 on the evaluation subset, and its size."""
        xs = self.x_test if self.eval_index is None else self.x_test[self.eval_index]
        ys = self.y_test if self.eval_index is None else self.y_test[self.eval_index]
        correct = torch.zeros(hi - lo, dtype=torch.int64, device=self.device)
        for cs in chunks(hi - lo, self._eval_clients()):
            rows = slice(lo + cs.start, lo + cs.stop)
            for sl in chunks(xs.shape[0], _EVAL_SAMPLES):
                correct[cs] += client_correct(self.model, self.layout, self.x[rows], xs[sl],
                                              ys[sl], self.strategy)
        return correct, int(xs.shape[0])

    def _eval_clients(self) -> int:
        """Clients per chunk of :meth:`_correct` (:data:`_EVAL_CLIENTS_CPU_CONV` for a model
        with convolutions on the CPU, else :data:`_EVAL_CLIENTS`)."""
        if self.device.type == "cpu" and has_conv(self.model):
            return _EVAL_CLIENTS_CPU_CONV
        return _EVAL_CLIENTS

    def _evaluate(self) -> tuple[float, np.ndarray]:
        self.test_accuracy = self._accuracy(self.average_model())
        self.client_acc = self.client_accuracies()
        self.last_eval_round = self.round
        return self.test_accuracy, self.client_acc

    def test_loss(self) -> float:
        """Cross-entropy of the average model on the test set."""
        flat = self.average_model()
        total = 0.0
        for sl in chunks(self.dataset.n_test, 4 * _EVAL_SAMPLES):
            logits = single_logits(self.model, self.layout, flat, self.x_test[sl])
            total += float(F.cross_entropy(logits, self.y_test[sl], reduction="sum"))
        return total / max(1, self.dataset.n_test)

    # ---------------------------------------------------------------------------------------
    # the run

    def run(self, callback: Callable[[dict], Any] | None = None, *,
            checkpoint_path: str | Path | None = None) -> RunResult:
        """Run until ``config.rounds``, the target accuracy, a failure, a callback ``"stop"``,
        or an interrupt (Ctrl-C finishes the current round, saves a checkpoint and returns
        status ``aborted``; a second Ctrl-C stops at once, without a checkpoint)."""
        cfg = self.config
        status, reason, saved = "succeeded", None, None
        self._judge_loaded_history()
        with _InterruptGuard() as guard:
            try:
                while self.round < cfg.rounds:
                    if self.rounds_to_target is not None:   # reached before this run went on
                        reason = (f"target accuracy {cfg.target_accuracy} reached at round "
                                  f"{self.rounds_to_target}")
                        break
                    if self.round < cfg.rounds - cfg.mix_rounds:
                        row = self.step()
                    else:
                        self.enter_tail()
                        row = self.step(train=False)
                    if self.failure is not None:
                        status, reason = "failed", self.failure
                        break
                    if self.rounds_to_target is not None:
                        reason = (f"target accuracy {cfg.target_accuracy} reached at round "
                                  f"{self.rounds_to_target}")
                        break
                    if callback is not None and callback(row) == "stop":
                        reason = f"stopped by callback at round {self.round}"
                        break
                    if self._interrupted(guard.interrupted):
                        raise KeyboardInterrupt
                else:
                    if self.rounds_to_target is not None:   # on rounds loaded, at the budget
                        reason = (f"target accuracy {cfg.target_accuracy} reached at round "
                                  f"{self.rounds_to_target}")
                    elif cfg.target_accuracy is not None:
                        reason = f"target accuracy {cfg.target_accuracy} not reached"
            except KeyboardInterrupt:
                status = "aborted"
                if self._in_round:
                    reason = (f"interrupted during round {self.round + 1}; state is mid-round, "
                              f"so no checkpoint was written")
                    self._in_round = False
                else:
                    saved = self._abort_checkpoint(checkpoint_path)
                    reason = f"interrupted after round {self.round}; checkpoint at {saved}"
        return self._result(status, reason, saved)

    def _judge_loaded_history(self) -> None:
        """Judge the target on rounds loaded from a run that trained without it (a reference
        pilot continued by its plan's run): where they already reach it, the run ends at once.
        A run that judged the target itself finds what it found (the last evaluation is judged
        only once its successor is known or the budget is spent, as while running)."""
        cfg = self.config
        if cfg.target_accuracy is None or self.rounds_to_target is not None or not self.history:
            return
        key = TARGET_METRICS[cfg.target_metric]
        self.rounds_to_target = first_crossing([(h["round"], h[key]) for h in self.history],
                                               cfg.target_accuracy,
                                               complete=self.round >= cfg.rounds)

    def _abort_checkpoint(self, path: str | Path | None) -> str:
        if path is None:
            handle = tempfile.NamedTemporaryFile(prefix="airplan-checkpoint-", suffix=".pt",
                                                 delete=False)
            handle.close()
            path = handle.name
        self.save(path)
        return str(path)

    def _result(self, status: str, reason: str | None, saved: str | None) -> RunResult:
        final_acc = client_acc = None
        finite = self._finite()
        if finite and self.round > 0:
            with torch_threads(self.config.threads):
                if self.last_eval_round != self.round:
                    self._evaluate()
            final_acc, client_acc = self.test_accuracy, self.client_acc
        elif finite:
            with torch_threads(self.config.threads):
                final_acc, client_acc = self._evaluate()
        losses = [h["train_loss"] for h in self.history if h["train_loss"] is not None]
        final_loss = float(losses[-1]) if losses else None
        h = self.history
        cfg = self.config
        return RunResult(
            status=status,
            reason=reason,
            rounds=self.round,
            rounds_to_target=self.rounds_to_target,
            final_accuracy=final_acc,
            final_loss=final_loss,
            client_accuracies=tuple(float(a) for a in client_acc) if client_acc is not None
            else (),
            client_acc_mean=float(client_acc.mean()) if client_acc is not None else None,
            client_acc_var=float(client_acc.var()) if client_acc is not None else None,
            jain_fairness=jain_index(client_acc) if client_acc is not None else None,
            total_channel_uses=float(sum(r["channel_uses"] for r in h)),
            total_energy_j=float(sum(r["energy_j"] for r in h)),
            total_bits=float(sum(r["bits"] for r in h)),
            total_slots=float(sum(r["slots"] for r in h)),
            history=tuple(dict(r) for r in h),
            algorithm=self.algorithm,
            strategy=self.strategy,
            warnings=self.warnings,
            checkpoint_path=saved,
            seeds={"data_seed": cfg.data_seed, "train_seed": cfg.train_seed,
                   "channel_seed": cfg.channel_seed},
            device=device_name(self.device),
        )

    # ---------------------------------------------------------------------------------------
    # re-optimisation and checkpoints

    def rewire(self, topology: Any, k_ratio: float | None = None) -> None:
        """Switch to a new topology (and its W and schedule) between rounds, keeping every
        client model, and so the average model, unchanged. CHOCO's receiver aggregates are
        re-synchronised to the new weights (a periodic topology's: those of the next round,
        whose phase is the run's round index modulo the period). ``k_ratio`` (re-optimisation
        may only raise it) changes the compression too: CHOCO keeps its public replicas and
        sends more coordinates with the matching default step, or gives way to D-SGD at k = 1.
        The run's configuration records the new k, so a checkpoint written after the change
        resumes with it."""
        n = topology.graph.number_of_nodes()
        if n != self.n:
            raise ExecutionError(f"cannot rewire {self.n} clients onto a topology of {n} nodes")
        self._check_clique_averaging(clique_averaging_enabled(topology))
        schedule = link_schedule(topology, self.device)
        check_schedule(self.algorithm, self.config.mask, len(schedule))
        if self.algorithm == "matcha":
            if len(schedule) > 1:
                raise ExecutionError("matcha samples matchings of one static graph; the new "
                                     "topology changes every round")
            schedule = (self.rule.set_topology(topology, self.device),)
        if k_ratio is not None and float(k_ratio) != self.config.k_ratio:
            self._recompress(float(k_ratio))
        links = schedule[self.round % len(schedule)]      # the next round's
        self.topology = topology
        self.link_schedule = schedule
        self.links = links
        self.clique_averaging = (CliqueAveraging(topology, links)
                                 if clique_averaging_enabled(topology) else None)
        if isinstance(self.rule, DSGD):
            self.rule.decay = self._decay(topology)
        with torch_threads(self.config.threads):
            self.rule.rewire(links)

    def enter_tail(self) -> None:
        """Rewire to where the plan's mixing-only tail mixes (``config.mix_on``: the complete
        graph, built as the planner builds the fully connected reference), once; nothing for a
        tail on the run's own topology. :meth:`run` calls it before each tail round; a
        checkpoint written in the tail is restored onto that topology (:meth:`load`)."""
        on = self.config.mix_on
        if on is None or self.topology.spec.family == on:
            return
        self.rewire(build(TopologySpec.fully_connected(self.n, seed=self.topology.spec.seed)))

    def tail_started(self, round_: int) -> bool:
        """Whether a run that has completed ``round_`` rounds mixes on its tail's topology
        (:meth:`enter_tail` ran before round ``rounds - mix_rounds + 1``)."""
        cfg = self.config
        return cfg.mix_on is not None and round_ > cfg.rounds - cfg.mix_rounds

    def checkpoint_in_tail(self, state: dict[str, Any]) -> bool:
        """Whether the checkpoint ``state`` was written on the tail's topology (judged by the
        configuration that wrote it); ExecutionError where this run's configuration would put
        that round on the other side of the tail's start (a resume whose ``rounds`` moves the
        start of a tail on another topology across the checkpoint)."""
        done = int(state["round"])
        saved = state.get("config")
        if saved is None:
            return self.tail_started(done)
        on, rounds = saved.get("mix_on"), int(saved.get("rounds", self.config.rounds))
        theirs = on is not None and done > rounds - int(saved.get("mix_rounds") or 0)
        # another mix_on is refused by the configuration check, with its own message
        if on == self.config.mix_on and theirs != self.tail_started(done):
            raise ExecutionError(
                f"the checkpoint at round {done} was written "
                f"{'inside' if theirs else 'before'} its tail on the {on} graph (rounds = "
                f"{rounds}); with rounds = {self.config.rounds} that round falls "
                f"{'before' if theirs else 'inside'} it. Resume with rounds = {rounds}")
        return theirs

    def _check_clique_averaging(self, enabled: bool) -> None:
        """Clique Averaging (``enabled`` by the topology) combines with D-SGD, CHOCO and
        paper_literal only."""
        if enabled and self.algorithm not in (
                "dsgd", "choco", "paper_literal"):
            raise ExecutionError(
                f"Clique Averaging (a d_cliques plan with averaging 'clique') works with dsgd "
                f"and choco, not {self.algorithm}: use averaging 'none'")

    def _dsgd(self, x0: torch.Tensor) -> DSGD:
        """The D-SGD rule of this run: over a noisy channel it sends ``config.ota_payload``; a
        topology that changes every round sends the centred models (decay 0), as the links
        whose history the difference form follows are those of one fixed W."""
        return DSGD(self.x.shape[0], self.d, x0=x0, payload=self.config.ota_payload,
                    decay=self._decay(self.topology))

    def _decay(self, topology: Any) -> float:
        """The difference form's decay for a topology (:func:`.gossip.difference_decay` of its
        W's mixing rate; 0 for one that changes every round or a noiseless channel)."""
        if (self.config.channel.kind != "ota" or self.config.ota_payload != "difference"
                or topology.weights is None):
            return 0.0
        from ..plans.spectra import mixing_rho

        return difference_decay(mixing_rho(topology.weights))

    def _recompress(self, k_ratio: float) -> None:
        cfg = self.config
        if k_ratio < cfg.k_ratio:
            raise ExecutionError(f"re-optimisation only raises k (from {cfg.k_ratio:g}, asked "
                                 f"{k_ratio:g})")
        if self.algorithm not in ("dsgd", "choco"):
            raise ExecutionError(f"cannot change k of a {self.algorithm} run")
        self.config = attrs.evolve(cfg, k_ratio=k_ratio)
        self.k = k_from_ratio(k_ratio, self.d)
        self.gamma = self.config.resolved_gamma
        algorithm = self.config.resolved_algorithm
        if algorithm == "dsgd" and self.algorithm == "choco":
            self.rule = self._dsgd(self.rule.ref)
        elif algorithm == "choco":
            self.rule.k, self.rule.gamma = self.k, float(self.gamma)
        self.algorithm = algorithm

    def save(self, path: str | Path) -> None:
        """Write the full run state to ``path`` (see :mod:`.checkpoint`)."""
        from .checkpoint import save

        save(self, path)

    def use_strategy(self, strategy: str) -> None:
        """Compute local gradients with ``strategy`` from now on (a resume adopting the strategy
        of the checkpoint it loads)."""
        self.strategy = resolve_strategy(strategy, self.model, self.dataset.input_shape)
        self._grad = GradientEngine(self.model, self.layout, self.strategy)

    def load(self, path: str | Path) -> None:
        """Restore the run state saved by :meth:`save`; continuing is bit-identical to a run
        that was never interrupted (same thread count). When :attr:`checkpoint_owner` is set,
        a checkpoint written for another catalog or execution is refused."""
        from .checkpoint import read, restore

        state = read(path)
        if self.checkpoint_in_tail(state):           # written on the tail's topology
            self.enter_tail()
        restore(self, state, path, self.checkpoint_owner)
