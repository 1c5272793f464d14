"""Progress of a long planning call: its steps reported to a callback from a timer thread."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

#: Seconds a planning call runs before it reports its steps to its ``progress`` callback.
PROGRESS_AFTER = 1.0
#: Seconds between two reported steps at most: quicker steps are folded into the next line.
PROGRESS_EVERY = 0.5


class PlanningProgress:
    """The steps of one planning call (``building topology 3/14: ring ...``, ``costing 7/14:
    ...``, ``recording ...``) passed to ``callback(message)`` once the call has run ``after``
    seconds (default :data:`PROGRESS_AFTER`), at most one line every ``every`` seconds (default
    :data:`PROGRESS_EVERY`): a step that starts sooner after the last line is reported by a
    timer thread if it is still under way then, so every step that takes longer than that is
    shown while it runs and a burst of quick steps gives one line. Nothing is reported after
    :meth:`close`, nor without a callback; with both times 0 every step is reported at once."""

    def __init__(self, callback: Callable[[str], Any] | None, after: float | None = None,
                 every: float | None = None):
        self.callback = callback
        self.after = PROGRESS_AFTER if after is None else float(after)
        self.every = PROGRESS_EVERY if every is None else float(every)
        self.start = time.perf_counter()
        self._current: str | None = None
        self._shown: str | None = None
        self._last = -math.inf
        self._lock = threading.Lock()
        self._open = callback is not None
        self._stop = threading.Event()
        if self._open and (self.after > 0 or self.every > 0):
            threading.Thread(target=self._watch, name="airplan-planning-progress",
                             daemon=True).start()

    def step(self, message: str) -> None:
        """A new step starts: report it when the call has run long enough."""
        if not self._open:
            return
        with self._lock:
            self._current = message
            now = time.perf_counter()
            if now - self.start >= self.after and now - self._last >= self.every:
                self._emit(message, now)

    def _watch(self) -> None:
        if self._stop.wait(self.after):
            return
        while True:
            with self._lock:
                if self._current is not None and self._current != self._shown:
                    self._emit(self._current, time.perf_counter())
            if self._stop.wait(max(self.every, 0.05)):
                return

    def _emit(self, message: str, now: float) -> None:
        if self._open:
            self._shown, self._last = message, now
            self.callback(message)

    def close(self) -> None:
        with self._lock:
            self._open = False
        self._stop.set()


__all__ = ["PROGRESS_AFTER", "PROGRESS_EVERY", "PlanningProgress"]
