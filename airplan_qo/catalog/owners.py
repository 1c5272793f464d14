"""Who owns a ``running`` row (an execution or an evaluation), and whether that process lives.

Training holds the catalog file only while it writes (see docs/catalog.md, Concurrent access),
so the file lock no longer says whether a ``running`` row still has a process behind it. Each
such row records its owner: ``owner_pid``, ``owner_host`` and ``owner_started`` (an identity of
the process's start, so a later process that reuses the PID is not taken for the owner), and
its owner refreshes ``heartbeat_at`` whenever it writes progress. :func:`owner_alive` decides:

- no owner recorded, or no heartbeat (rows written by versions that held the file for the whole
  run, which cannot be running while this process has the file): gone;
- an owner on this host: alive exactly when a process with that PID exists, is not a zombie and,
  where both are known, started at the recorded instant;
- an owner on another host (which this one cannot inspect): alive until its heartbeat is older
  than :data:`STALE_AFTER_S` seconds.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import socket
from typing import Any, Mapping

#: Seconds without a heartbeat after which a row owned by a process on another host is taken
#: for abandoned by its process (killed, or its host gone).
STALE_AFTER_S = 600.0


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None where there is none."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name is in parentheses and may itself hold spaces or parentheses
    return text[text.rfind(")") + 2:].split()


@functools.lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def process_started(pid: int) -> str | None:
    """An identity of when process ``pid`` started (boot id and start time in clock ticks, from
    /proc), or None where the system does not tell (no /proc, no such process)."""
    fields = _proc_stat(pid)
    if fields is None or len(fields) < 20:
        return None
    return f"{_boot_id()}:{fields[19]}"


def this_owner() -> dict[str, Any]:
    """The ``owner_pid``, ``owner_host`` and ``owner_started`` columns naming this process."""
    pid = os.getpid()
    return {"owner_pid": pid, "owner_host": socket.gethostname(),
            "owner_started": process_started(pid)}


def describe_owner(pid: Any, host: Any) -> str:
    """'the process PID 42 on host h', or 'the process that ran it' when not recorded."""
    if pid is None:
        return "the process that ran it"
    return f"the process PID {pid}" + (f" on {host}" if host else "")


def pid_alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` on this host is alive (a zombie is not), and, when ``started``
    is given and the system tells, whether it is the process that started then."""
    pid = int(pid)
    if pid <= 0:
        return False
    if pid == os.getpid():
        return started is None or started == process_started(pid) or \
            process_started(pid) is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass        # another user's process: it exists
    except OSError:
        return False
    fields = _proc_stat(pid)
    if fields is not None and fields and fields[0] in ("Z", "X"):
        return False    # killed, not yet reaped by its parent
    if started:
        now = process_started(pid)
        if now is not None and now != started:
            return False    # the PID was reused by a later process
    return True


def owner_alive(row: Mapping[str, Any], *, now: dt.datetime | None = None,
                stale_after_s: float | None = None) -> bool:
    """Whether the process that owns ``row`` (a dict with ``owner_pid``, ``owner_host``, and
    optionally ``owner_started`` and ``heartbeat_at``, a naive UTC instant) is alive; see the
    module docstring for the rule."""
    pid = row.get("owner_pid")
    if pid is None or row.get("heartbeat_at") is None:
        return False
    host = row.get("owner_host")
    if not host or host == socket.gethostname():
        return pid_alive(int(pid), row.get("owner_started"))
    if now is None:
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    limit = STALE_AFTER_S if stale_after_s is None else stale_after_s
    return (now - row["heartbeat_at"]).total_seconds() < limit
