"""SIGTERM taken as Ctrl-C while an ``airplan`` command runs.

``kill``, ``timeout``, a batch scheduler's stop and torch's launcher stopping its processes send
SIGTERM, whose default ends the process without a word: a training run would be left
``running`` until the next read-write open of the catalog marked it ``interrupted``, its last
rounds since the periodic checkpoint lost. Inside :func:`terminate_as_interrupt` SIGTERM does
what Ctrl-C does instead: a run stops at the end of its round with a checkpoint and is recorded
``aborted`` (a second signal of either kind stops it at once), a statement that is not training
is interrupted. Unlike a Ctrl-C it also ends the command: :func:`terminated` tells a loop that
goes on after an interrupt (``airplan shell``) to stop. Programs of a user's own that train
through the Python API keep Python's default (docs/runtime.md, Engine).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

_received = threading.Event()


def terminated() -> bool:
    """Whether SIGTERM arrived inside the current :func:`terminate_as_interrupt`."""
    return _received.is_set()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Take SIGTERM as an interrupt (module docstring) until the block ends; the previous
    handler is put back afterwards. Main thread only (elsewhere a no-op, as Python allows
    signal handlers there alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: Any) -> None:
        _received.set()
        current = signal.getsignal(signal.SIGINT)
        if callable(current):
            current(signal.SIGINT, frame)     # the trainer's guard, or a KeyboardInterrupt
        else:
            raise KeyboardInterrupt

    _received.clear()
    old = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        _received.clear()


__all__ = ["terminate_as_interrupt", "terminated"]
