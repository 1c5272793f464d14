"""Checkpoints: the full state of a :class:`~.engine.Trainer` as tensors and plain containers.

Saved with ``torch.save`` and read back with ``torch.load(weights_only=True)``, so a checkpoint
can never run code when loaded. A checkpoint written for a catalog execution also records its
owner (the catalog's identity and the execution id, ``Trainer.checkpoint_owner``), and loading it
for another owner is refused. Stored: the stacked models and momentum buffers, the rule's state
(CHOCO public copies, receiver aggregates and reference; error-feedback memory), the
states of the data, training and channel generators, the round counter and history, and the
mixing matrix and schedule in use, every round's for a periodic topology (a run that was rewired
must be loaded into a trainer rewired the same way; the round counter decides which round of the
period comes next). Resuming gives bit-identical rounds to an uninterrupted run with the same seeds,
configuration and thread count.

Devices: a checkpoint is always read onto the CPU (``map_location="cpu"``), so one written on a
GPU loads on a machine without CUDA; :func:`load` then moves the models, momentum and rule state
to the trainer's device (``Trainer.device``). Resuming on another kind of device than the one
that wrote the checkpoint continues the run (same models, data, masks and link draws) but not
bit for bit: the arithmetic rounds differently and the channel noise is drawn by that device's
generator (:meth:`~.channel.Channel.set_state`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ExecutionError

__all__ = ["FORMAT", "RESUMABLE_CHANGES", "check_config", "check_owner", "load", "read",
           "restore", "same_schedule", "save", "state_dict"]

FORMAT = 1
#: Config fields that may differ between the saved run and the trainer it is loaded into.
RESUMABLE_CHANGES = frozenset({"rounds", "threads", "target_accuracy", "eval_every", "device"})
#: Config fields added after checkpoints were first written, with the value an older
#: checkpoint (which does not record them) ran with.
ADDED_FIELDS = {"transport": "ota", "bits": 32, "prox_mu": None, "matcha_budget": 0.5,
                "dllr_mask": "random", "dllr_sigma": 0.01, "dllr_order": "gauss_seidel",
                "dllr_beta_noise": 0.01, "mix_rounds": 0}


def _link_dict(links: Any) -> dict[str, torch.Tensor]:
    coo = links.weights.tocoo()
    return {
        "rows": torch.from_numpy(coo.row.astype(np.int64)),
        "cols": torch.from_numpy(coo.col.astype(np.int64)),
        "vals": torch.from_numpy(coo.data.astype(np.float64)),
        "slot_of": torch.from_numpy(np.asarray(links.slot_of, dtype=np.int64)),
    }


def _schedule(trainer: Any) -> tuple[Any, ...]:
    return tuple(getattr(trainer, "link_schedule", None) or (trainer.links,))


def _links(trainer: Any) -> dict[str, torch.Tensor]:
    """The first round's mixing matrix and schedule (the only one of a static topology)."""
    return _link_dict(_schedule(trainer)[0])


def _phases(trainer: Any) -> list[dict[str, torch.Tensor]]:
    """Every round's mixing matrix and schedule (one for a static topology), in phase order."""
    return [_link_dict(links) for links in _schedule(trainer)]


def state_dict(trainer: Any) -> dict[str, Any]:
    """Everything needed to continue ``trainer`` exactly (tensors and plain Python only)."""
    return {
        "format": FORMAT,
        "config": trainer.config.as_dict(),
        "algorithm": trainer.algorithm,
        "strategy": trainer.strategy,
        "round": trainer.round,
        "initial_loss": trainer.initial_loss,
        "rounds_to_target": trainer.rounds_to_target,
        "failure": trainer.failure,
        "last_eval_round": trainer.last_eval_round,
        "test_accuracy": trainer.test_accuracy,
        "client_acc": (None if trainer.client_acc is None
                       else torch.from_numpy(np.asarray(trainer.client_acc, dtype=np.float64))),
        "x": trainer.x,
        "m": trainer.m,
        "rule": trainer.rule.state(),
        "data_rng": trainer.data_rng.bit_generator.state,
        "train_gen": trainer.train_gen.get_state(),
        "channel": trainer.channel.state(),
        "history": [dict(row) for row in trainer.history],
        "links": _links(trainer),
        "link_phases": _phases(trainer),
        "owner": dict(getattr(trainer, "checkpoint_owner", None) or {}) or None,
        "device": str(getattr(trainer, "device", "cpu")),
    }


def save(trainer: Any, path: str | os.PathLike) -> None:
    """Write ``trainer``'s state to ``path`` atomically: to a temporary file of a unique name in
    the same folder, then renamed over ``path`` (two writers never share a temporary file)."""
    path = Path(path)
    tmp = None
    try:
        # a unique name, created exclusively, with the usual permissions (umask applies)
        tmp = str(path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp"))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            torch.save(state_dict(trainer), fh)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise ExecutionError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def read(path: str | os.PathLike) -> dict[str, Any]:
    """The state saved at ``path``, read safely (no code runs) onto the CPU, whatever device
    wrote it; ExecutionError when it is missing, unreadable, corrupt or not an AirPlan
    checkpoint."""
    path = Path(path)
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise ExecutionError(f"checkpoint {path} does not exist") from None
    except OSError as exc:
        raise ExecutionError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    except Exception:  # torch raises several types for corrupt or unsafe files
        raise ExecutionError(
            f"checkpoint {path} is corrupt or not an AirPlan checkpoint (it could not be read "
            "as plain tensors); delete it to start the execution again from round 0") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ExecutionError(f"checkpoint {path} is not a format-{FORMAT} AirPlan checkpoint")
    return state


def check_owner(state: dict[str, Any], path: str | os.PathLike,
                owner: dict[str, Any] | None) -> None:
    """Refuse a checkpoint written for another catalog or execution than ``owner``
    (``{"catalog_id": ..., "exec_id": ...}``; None: no check)."""
    if not owner:
        return
    saved = state.get("owner") or {}
    if not saved:
        raise ExecutionError(
            f"checkpoint {path} does not record which catalog and execution it belongs to "
            f"(written by an older version, possibly for another catalog in the same folder); "
            f"refusing to resume execution {owner.get('exec_id')} from it. Delete it to start "
            "again from round 0")
    for key, what in (("catalog_id", "catalog"), ("exec_id", "execution")):
        if str(saved.get(key)) != str(owner.get(key)):
            raise ExecutionError(
                f"checkpoint {path} belongs to {what} {saved.get(key)}, not {what} "
                f"{owner.get(key)}; refusing to resume from it")


def same_schedule(trainer: Any, state: dict[str, Any]) -> bool:
    """Whether ``trainer`` mixes over the topology the checkpoint ``state`` was taken on: the
    same W and slots in every round of the period (a checkpoint that lists no rounds was
    written for a static topology)."""
    saved = state.get("link_phases") or [state["links"]]
    mine = _phases(trainer)
    return len(saved) == len(mine) and all(_same_link_dict(a, b) for a, b in zip(mine, saved))


def _same_link_dict(mine: dict[str, torch.Tensor], saved: dict[str, torch.Tensor]) -> bool:
    if any(mine[k].shape != saved[k].shape for k in mine):
        return False
    order_a = np.lexsort((mine["cols"].numpy(), mine["rows"].numpy()))
    order_b = np.lexsort((saved["cols"].numpy(), saved["rows"].numpy()))
    return (np.array_equal(mine["rows"].numpy()[order_a], saved["rows"].numpy()[order_b])
            and np.array_equal(mine["cols"].numpy()[order_a], saved["cols"].numpy()[order_b])
            and np.allclose(mine["vals"].numpy()[order_a], saved["vals"].numpy()[order_b],
                            rtol=0, atol=1e-12)
            and torch.equal(mine["slot_of"], saved["slot_of"]))


def check_config(state: dict[str, Any], path: str | os.PathLike, mine: dict[str, Any]) -> None:
    """Refuse a checkpoint written with another run configuration than ``mine`` (a
    ``RunConfig.as_dict()``), up to :data:`RESUMABLE_CHANGES`."""
    theirs = state.get("config") or {}
    theirs = {**{k: v for k, v in ADDED_FIELDS.items() if k in mine}, **theirs}
    differ = sorted(k for k in set(mine) | set(theirs)
                    if k not in RESUMABLE_CHANGES and mine.get(k) != theirs.get(k))
    if differ:
        raise ExecutionError(
            f"checkpoint {path} was written with a different configuration "
            f"({', '.join(f'{k}: {theirs.get(k)!r} vs {mine.get(k)!r}' for k in differ)})"
        )


def load(trainer: Any, path: str | os.PathLike, owner: dict[str, Any] | None = None) -> None:
    """Restore the state saved at ``path`` into ``trainer`` (built with the same dataset,
    partition, topology and configuration, up to :data:`RESUMABLE_CHANGES`); with ``owner``,
    the checkpoint must have been written for that catalog and execution."""
    path = Path(path)
    restore(trainer, read(path), path, owner)


def restore(trainer: Any, state: dict[str, Any], path: str | os.PathLike,
            owner: dict[str, Any] | None = None, rows: int | None = None) -> None:
    """Restore a state read by :func:`read` from ``path`` into ``trainer`` (what :func:`load`
    does after reading; a distributed run reads the file once and restores it on every
    process). ``rows``: the state holds that many clients' models, a rank's share of the file's
    (a run split by rows); None: every client's."""
    check_owner(state, path, owner)
    check_config(state, path, trainer.config.as_dict())
    if state["strategy"] != trainer.strategy and trainer.config.strategy == "auto":
        # 'auto' resolves by device: a run resumed on another kind of device keeps the
        # strategy that wrote it (the same mathematics either way)
        trainer.use_strategy(state["strategy"])
    if state["strategy"] != trainer.strategy:
        raise ExecutionError(
            f"checkpoint {path} used local-training strategy '{state['strategy']}' but this "
            f"trainer resolved '{trainer.strategy}'; pass strategy='{state['strategy']}'"
        )
    shape = (int(trainer.n) if rows is None else rows, int(trainer.d))
    if tuple(state["x"].shape) != shape:
        raise ExecutionError(
            f"checkpoint {path} holds models of shape {tuple(state['x'].shape)}, this trainer "
            f"has {shape}"
        )
    if not same_schedule(trainer, state):
        raise ExecutionError(
            f"checkpoint {path} was taken on a different topology or mixing matrix; build the "
            f"trainer on the topology in use at that time (rewire first if the run was rewired)"
        )
    device = getattr(trainer, "device", torch.device("cpu"))
    trainer.x = _on(state["x"], device)
    trainer.m = _on(state["m"], device)
    trainer._g = torch.empty_like(trainer.x)
    trainer._scratch = torch.empty_like(trainer.x)
    trainer.rule.set_state({k: v.to(device) if isinstance(v, torch.Tensor) else v
                            for k, v in state["rule"].items()})      # set_state copies
    trainer.data_rng.bit_generator.state = state["data_rng"]
    trainer.train_gen.set_state(state["train_gen"])
    trainer.channel.set_state(state["channel"], int(state["round"]))
    trainer.round = int(state["round"])
    trainer.initial_loss = state["initial_loss"]
    trainer.rounds_to_target = state["rounds_to_target"]
    trainer.failure = state["failure"]
    trainer.last_eval_round = int(state["last_eval_round"])
    trainer.test_accuracy = state["test_accuracy"]
    trainer.client_acc = None if state["client_acc"] is None else state["client_acc"].numpy()
    trainer.history = [dict(row) for row in state["history"]]


def _on(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A tensor read by :func:`read` (on the CPU) on ``device``: a copy of its own either way."""
    return tensor.clone() if device.type == "cpu" else tensor.to(device)
