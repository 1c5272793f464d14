"""Checkpoints: the full state of a :class:`~.engine.Trainer` as tensors and plain containers.

Saved with ``torch.save`` and read back with ``torch.load(weights_only=True)``, so a checkpoint
can never run code when loaded. Stored: the stacked models and momentum buffers, the rule's state
(CHOCO public copies, receiver aggregates and reference; error-feedback memory), the
states of the data, training and channel generators, the round counter and history, and the
mixing matrix and schedule in use (a run that was rewired must be loaded into a trainer rewired
the same way). Resuming gives bit-identical rounds to an uninterrupted run with the same seeds,
configuration and thread count.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ExecutionError

__all__ = ["FORMAT", "RESUMABLE_CHANGES", "load", "save", "state_dict"]

FORMAT = 1
#: Config fields that may differ between the saved run and the trainer it is loaded into.
RESUMABLE_CHANGES = frozenset({"rounds", "threads", "target_accuracy", "eval_every"})


def _links(trainer: Any) -> dict[str, torch.Tensor]:
    coo = trainer.links.weights.tocoo()
    return {
        "rows": torch.from_numpy(coo.row.astype(np.int64)),
        "cols": torch.from_numpy(coo.col.astype(np.int64)),
        "vals": torch.from_numpy(coo.data.astype(np.float64)),
        "slot_of": torch.from_numpy(np.asarray(trainer.links.slot_of, dtype=np.int64)),
    }


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
    }


def save(trainer: Any, path: str | os.PathLike) -> None:
    """Write ``trainer``'s state to ``path`` atomically (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(state_dict(trainer), tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise ExecutionError(f"cannot write checkpoint {path}: {exc}") from None


def _same_links(trainer: Any, saved: dict[str, torch.Tensor]) -> bool:
    mine = _links(trainer)
    if any(mine[k].shape != saved[k].shape for k in mine):
        return False
    order_a = np.lexsort((mine["cols"].numpy(), mine["rows"].numpy()))
    order_b = np.lexsort((saved["cols"].numpy(), saved["rows"].numpy()))
    return (np.array_equal(mine["rows"].numpy()[order_a], saved["rows"].numpy()[order_b])
            and np.array_equal(mine["cols"].numpy()[order_a], saved["cols"].numpy()[order_b])
            and np.allclose(mine["vals"].numpy()[order_a], saved["vals"].numpy()[order_b],
                            rtol=0, atol=1e-12)
            and torch.equal(mine["slot_of"], saved["slot_of"]))


def load(trainer: Any, path: str | os.PathLike) -> None:
    """Restore the state saved at ``path`` into ``trainer`` (built with the same dataset,
    partition, topology and configuration, up to :data:`RESUMABLE_CHANGES`)."""
    path = Path(path)
    try:
        state = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise ExecutionError(f"checkpoint {path} does not exist") from None
    except Exception as exc:  # torch raises several types for corrupt or unsafe files
        raise ExecutionError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ExecutionError(f"checkpoint {path} is not a format-{FORMAT} AirPlan checkpoint")
    mine, theirs = trainer.config.as_dict(), state["config"]
    differ = sorted(k for k in set(mine) | set(theirs)
                    if k not in RESUMABLE_CHANGES and mine.get(k) != theirs.get(k))
    if differ:
        raise ExecutionError(
            f"checkpoint {path} was written with a different configuration "
            f"({', '.join(f'{k}: {theirs.get(k)!r} vs {mine.get(k)!r}' for k in differ)})"
        )
    if state["strategy"] != trainer.strategy:
        raise ExecutionError(
            f"checkpoint {path} used local-training strategy '{state['strategy']}' but this "
            f"trainer resolved '{trainer.strategy}'; pass strategy='{state['strategy']}'"
        )
    if tuple(state["x"].shape) != tuple(trainer.x.shape):
        raise ExecutionError(
            f"checkpoint {path} holds models of shape {tuple(state['x'].shape)}, this trainer "
            f"has {tuple(trainer.x.shape)}"
        )
    if not _same_links(trainer, state["links"]):
        raise ExecutionError(
            f"checkpoint {path} was taken on a different topology or mixing matrix; build the "
            f"trainer on the topology in use at that time (rewire first if the run was rewired)"
        )
    trainer.x = state["x"].clone()
    trainer.m = state["m"].clone()
    trainer._g = torch.empty_like(trainer.x)
    trainer._scratch = torch.empty_like(trainer.x)
    trainer.rule.set_state(state["rule"])
    trainer.data_rng.bit_generator.state = state["data_rng"]
    trainer.train_gen.set_state(state["train_gen"])
    trainer.channel.set_state(state["channel"])
    trainer.round = int(state["round"])
    trainer.initial_loss = state["initial_loss"]
    trainer.rounds_to_target = state["rounds_to_target"]
    trainer.failure = state["failure"]
    trainer.last_eval_round = int(state["last_eval_round"])
    trainer.test_accuracy = state["test_accuracy"]
    trainer.client_acc = None if state["client_acc"] is None else state["client_acc"].numpy()
    trainer.history = [dict(row) for row in state["history"]]
