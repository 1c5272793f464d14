"""The workload a user asks to plan: dataset, clients, heterogeneity, channel, model, training.

``WORKLOAD_PARAMS`` declares every ``WITH (key = value)`` / ``--param key=value`` key with its type,
default and range, so SQL, the CLI and the Python API validate parameters identically.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import attrs

from ..errors import ValidationError
from ..registry import suggest
from .channel_config import CHANNELS, DEFAULT_CHANNEL, ChannelConfig


@attrs.frozen
class WorkloadParam:
    name: str
    kind: type
    default: Any
    doc: str
    check: Callable[[Any], str | None] = lambda v: None
    #: the allowed values, or a function returning them (registries that users extend)
    choices: tuple[str, ...] | Callable[[], Sequence[str]] = ()
    #: said after the allowed values when a value is not among them
    hint: str = ""

    def allowed(self) -> tuple[str, ...]:
        return tuple(self.choices() if callable(self.choices) else self.choices)


def _model_names() -> list[str]:
    from ..model_size import MODELS

    return MODELS.names()


def _partition_schemes() -> list[str]:
    from ..data.partition import PARTITIONERS

    return PARTITIONERS.names()


def _range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           hi_open: bool = False) -> Callable[[Any], str | None]:
    def check(v):
        bad_lo = lo is not None and (v <= lo if lo_open else v < lo)
        bad_hi = hi is not None and (v >= hi if hi_open else v > hi)
        if bad_lo or bad_hi or (isinstance(v, float) and not math.isfinite(v)):
            left = "(" if lo_open or lo is None else "["   # an infinite end is never included
            right = ")" if hi_open or hi is None else "]"
            finite = "a finite number " if lo is None or hi is None else ""
            return (f"must be {finite}in {left}{'-inf' if lo is None else lo}, "
                    f"{'inf' if hi is None else hi}{right}")
        return None

    return check


WORKLOAD_PARAMS: dict[str, WorkloadParam] = {p.name: p for p in [
    WorkloadParam("alpha", float, 0.5, "Dirichlet label-skew concentration (smaller = more skew)",
                  _range(0, None, lo_open=True)),
    WorkloadParam("partition", str, "dirichlet", "partition scheme",
                  choices=_partition_schemes),
    WorkloadParam("snr_db", float, DEFAULT_CHANNEL.snr_db, "channel SNR in dB", _range(-30, 60)),
    WorkloadParam("model", str, "mlp", "model architecture",
                  choices=_model_names,
                  hint="; add your own with airplan_qo.register_model(name, factory)"),
    WorkloadParam("lr", float, 0.05, "local SGD learning rate", _range(0, 10, lo_open=True)),
    WorkloadParam("momentum", float, 0.9, "local SGD momentum", _range(0, 1, hi_open=True)),
    WorkloadParam("batch_size", int, 32, "local mini-batch size", _range(1, 1 << 16)),
    WorkloadParam("local_steps", int, 5, "local SGD steps per round", _range(1, 10000)),
    WorkloadParam("rounds", int, 100, "maximum training rounds", _range(1, 1_000_000)),
    WorkloadParam("target_accuracy", float, None, "absolute accuracy target (else from the SLA)",
                  _range(0, 1, lo_open=True)),
    WorkloadParam("g_th", float, DEFAULT_CHANNEL.g_th,
                  "channel-inversion truncation threshold on |h|^2",
                  _range(0, None, lo_open=True)),
    WorkloadParam("tx_power_dbm", float, DEFAULT_CHANNEL.tx_power_dbm, "transmit power in dBm",
                  _range(-30, 60)),
    WorkloadParam("bandwidth_hz", float, DEFAULT_CHANNEL.bandwidth_hz,
                  "channel bandwidth (complex symbols per second)",
                  _range(0, None, lo_open=True)),
    WorkloadParam("dropout", float, DEFAULT_CHANNEL.dropout, "per-round client dropout probability",
                  _range(0, 1, hi_open=True)),
    WorkloadParam("channel", str, DEFAULT_CHANNEL.kind, "channel model", choices=CHANNELS),
    WorkloadParam("ota_payload", str, "difference",
                  "what uncompressed D-SGD sends over the air: its change since the link's last "
                  "delivery ('difference') or the whole model, as in the AirPlan paper ('model')",
                  choices=("difference", "model")),
    WorkloadParam("access_point", bool, False,
                  "the clients reach an access point (a server): FedAvg and FedProx may be "
                  "planned through it"),
    WorkloadParam("topology_seed", int, 0, "seed of random topologies", _range(0, None)),
    WorkloadParam("seed", int, 0, "master seed (data, training and channel seeds derive from it)",
                  _range(0, None)),
    WorkloadParam("sketch_eps", float, 0.05, "Count-Min error eps", _range(0, 1, lo_open=True,
                                                                            hi_open=True)),
    WorkloadParam("sketch_delta", float, 0.01, "Count-Min failure probability delta",
                  _range(0, 1, lo_open=True, hi_open=True)),
    WorkloadParam("dp_epsilon", float, None, "DP epsilon for released sketches (none = exact)",
                  _range(0, None, lo_open=True)),
    WorkloadParam("dp_delta", float, 1e-5, "DP delta for released sketches",
                  _range(0, 1, lo_open=True, hi_open=True)),
]}


#: Names users reach for that are deliberately not settings, with the reason.
NOT_SETTINGS = {
    "error_feedback": "compressed plans (k < 1) run CHOCO, whose public replicas already carry "
                      "the compression residual (error feedback is built in); dense plans "
                      "(k = 1) do not compress",
    "device": "it is an execution option (where training runs, not what is planned): "
              "WITH (device = ...) in TRAIN, --device on the command line, device= in "
              "Session.execute or connect",
}


def coerce_param(name: str, value: Any) -> Any:
    """Validate one workload parameter; the error names the key and the allowed values."""
    spec = WORKLOAD_PARAMS.get(name)
    if name in NOT_SETTINGS:
        raise ValidationError(f"'{name}' is not a workload setting: {NOT_SETTINGS[name]}")
    if spec is None:
        raise ValidationError(f"unknown parameter '{name}'{suggest(name, list(WORKLOAD_PARAMS))}; "
                              f"known: {', '.join(sorted(WORKLOAD_PARAMS))}")
    if value is None:
        return None
    try:
        if spec.kind is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                    raise ValueError
                value = low in ("true", "1", "on", "yes")
            elif not isinstance(value, (bool, int)):
                raise ValueError
            out: Any = bool(value)
        elif spec.kind is int:
            if isinstance(value, bool):
                raise ValueError
            f = float(value)
            if not f.is_integer():
                raise ValueError
            out = int(f)
        elif spec.kind is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
        else:
            if not isinstance(value, str):
                raise ValueError
            out = value.strip().lower()
    except (TypeError, ValueError, OverflowError):
        raise ValidationError(
            f"parameter '{name}' must be {spec.kind.__name__}, got {value!r}") from None
    allowed = spec.allowed()
    if allowed and out not in allowed:
        raise ValidationError(f"parameter '{name}' must be one of {', '.join(allowed)}, "
                              f"got {out!r}{suggest(out, list(allowed))}{spec.hint}")
    problem = spec.check(out)
    if problem:
        raise ValidationError(f"parameter '{name}' {problem}, got {out!r}")
    return out


def _positive_clients(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ValidationError(f"number of clients must be an integer >= 2, got {value!r}")


@attrs.frozen
class Workload:
    """A training workload; every field has a documented default (see WORKLOAD_PARAMS)."""

    dataset: str = "digits"
    clients: int = attrs.field(default=20, validator=_positive_clients)
    alpha: float = 0.5
    partition: str = "dirichlet"
    snr_db: float = DEFAULT_CHANNEL.snr_db
    model: str = "mlp"
    lr: float = 0.05
    momentum: float = 0.9
    batch_size: int = 32
    local_steps: int = 5
    rounds: int = 100
    target_accuracy: float | None = None
    g_th: float = DEFAULT_CHANNEL.g_th
    tx_power_dbm: float = DEFAULT_CHANNEL.tx_power_dbm
    bandwidth_hz: float = DEFAULT_CHANNEL.bandwidth_hz
    dropout: float = DEFAULT_CHANNEL.dropout
    channel: str = DEFAULT_CHANNEL.kind
    ota_payload: str = "difference"
    access_point: bool = False
    topology_seed: int = 0
    seed: int = 0
    sketch_eps: float = 0.05
    sketch_delta: float = 0.01
    dp_epsilon: float | None = None
    dp_delta: float = 1e-5

    def __attrs_post_init__(self):
        for name in WORKLOAD_PARAMS:
            value = getattr(self, name)
            default = WORKLOAD_PARAMS[name].default
            if value is not None or default is not None:
                object.__setattr__(self, name, coerce_param(name, value))
        object.__setattr__(self, "dataset", str(self.dataset).lower())
        from ..data.datasets import DATASETS
        from ..errors import UnknownNameError

        try:
            DATASETS.get(self.dataset)      # an unknown name fails here, with a suggestion
        except UnknownNameError as exc:
            raise UnknownNameError(f"{exc}; add your own with airplan_qo.register_dataset("
                                   f"name, data)") from None

    @classmethod
    def from_params(cls, dataset: str, clients: int, params: dict[str, Any] | None = None
                    ) -> "Workload":
        values = {k: coerce_param(k, v) for k, v in (params or {}).items()}
        return cls(dataset=dataset, clients=clients, **values)

    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in WORKLOAD_PARAMS}

    @property
    def channel_config(self) -> ChannelConfig:
        """The channel settings (given flat: ``channel`` names the kind) as one value."""
        return ChannelConfig.from_flat(self.params())
