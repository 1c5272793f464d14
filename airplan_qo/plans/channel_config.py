"""The channel settings of a workload, a plan and a run, as one value.

:class:`ChannelConfig` is what the planner costs (:mod:`.plan`) and what the runtime simulates
(:mod:`airplan_qo.runtime.channel`): the kind (``ota``: fading, truncated channel inversion,
AWGN; ``ideal``: every link delivers exactly), the SNR, the truncation threshold ``g_th`` on
|h|^2, the transmit power, the bandwidth and the per-round client dropout.

Users give these settings as flat parameters (``WITH (snr_db = 5, channel = 'ideal')``,
``Workload(snr_db=5)``, the ``channel`` key naming the kind); :meth:`ChannelConfig.from_flat`
turns them into the value and :meth:`ChannelConfig.flat` back (the form run configurations and
checkpoints store). ``tx_power_dbm`` defaults to 23 dBm, the workload default every planned and
executed run has used.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from ..errors import ValidationError

#: The channel kinds.
CHANNELS = ("ideal", "ota")
#: The flat parameter names of the settings other than the kind (the kind's flat name is
#: ``channel``).
CHANNEL_PARAMS = ("snr_db", "g_th", "tx_power_dbm", "bandwidth_hz", "dropout")


def _kind(_inst: Any, _attr: Any, value: Any) -> None:
    if value not in CHANNELS:
        raise ValidationError(f"channel must be one of {', '.join(CHANNELS)}, got {value!r}")


def number_in(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
              hi_open: bool = False):
    """An attrs validator: a finite number in the interval (bounds open or closed), else a
    ValidationError naming the field and the interval."""
    def check(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValidationError(f"{attr.name} must be a number, got {value!r}") from None
        bad = not math.isfinite(v)
        if lo is not None:
            bad |= v <= lo if lo_open else v < lo
        if hi is not None:
            bad |= v >= hi if hi_open else v > hi
        if bad:
            left = "(" if lo_open else "["
            right = ")" if hi_open else "]"
            raise ValidationError(
                f"{attr.name} must be finite and in {left}{lo if lo is not None else '-inf'}, "
                f"{hi if hi is not None else 'inf'}{right}, got {value!r}"
            )
    return check


@attrs.frozen
class ChannelConfig:
    """Channel model of a workload, a plan and a run: ``ota`` (fading, truncated inversion,
    AWGN) or ``ideal``."""

    kind: str = attrs.field(default="ota", validator=_kind)
    snr_db: float = attrs.field(default=10.0, validator=number_in())
    g_th: float = attrs.field(default=0.1, validator=number_in(0.0, lo_open=True))
    tx_power_dbm: float = attrs.field(default=23.0, validator=number_in())
    bandwidth_hz: float = attrs.field(default=1e6, validator=number_in(0.0, lo_open=True))
    dropout: float = attrs.field(default=0.0, validator=number_in(0.0, 1.0, hi_open=True))

    @property
    def active_probability(self) -> float:
        """Probability that a link is not truncated: P(|h|^2 >= g_th) = exp(-g_th)."""
        return 1.0 if self.kind == "ideal" else math.exp(-self.g_th)

    @property
    def tx_power_w(self) -> float:
        return 10 ** (self.tx_power_dbm / 10.0) / 1000.0

    def flat(self) -> dict[str, Any]:
        """The settings as flat parameters: ``channel`` (the kind) and :data:`CHANNEL_PARAMS`."""
        return {"channel": self.kind, **{name: getattr(self, name) for name in CHANNEL_PARAMS}}

    @classmethod
    def from_flat(cls, params: Mapping[str, Any],
                  base: "ChannelConfig | None" = None) -> "ChannelConfig":
        """The value of flat parameters (``channel`` and :data:`CHANNEL_PARAMS`; other keys are
        ignored, missing ones are those of ``base``, by default the defaults)."""
        values = {name: params[name] for name in CHANNEL_PARAMS if name in params}
        if "channel" in params:
            values["kind"] = params["channel"]
        return attrs.evolve(base, **values) if base is not None else cls(**values)


#: The default settings (an over-the-air channel).
DEFAULT_CHANNEL = ChannelConfig()
#: A run's channel when none is given: every link delivers exactly.
IDEAL_CHANNEL = ChannelConfig(kind="ideal")
