"""Where ``airplan evaluate`` trains the runs it cannot reuse: this process, a local pool of
worker processes, or any :class:`concurrent.futures.Executor`, a Dask cluster's included.

``executor`` (Python) / ``--executor`` (CLI) takes

- ``None`` or ``"local"``: this machine (``workers`` = 1 trains in this process, more in a pool
  of spawn worker processes; :class:`~.runner._Trainer`);
- ``"dask://HOST[:PORT]"`` (port 8786 when left out), or a Dask scheduler address as
  ``dask scheduler`` prints it (``"tcp://HOST:PORT"``, ``"tls://HOST:PORT"``): connect a
  ``dask.distributed.Client`` to that scheduler (the optional extra ``airplan-qo[dask]``) and
  train on its workers; the client is closed at the end;
- a :class:`concurrent.futures.Executor`, e.g. ``dask.distributed.Client(...).get_executor()``:
  used as it is and left open (it belongs to the caller).

Whatever trains, workers only train (:func:`train_cached`; on an executor through
:func:`on_worker`) and return the run; the calling process records the runs in its catalog, a
workload's at a time in one transaction, exactly as with the local pool. The local pool's
processes are started, and warmed, by :func:`start_pool`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from concurrent.futures import Executor
from typing import Any

import attrs

from ..errors import ExecutionError, ValidationError

#: How long to wait for a Dask scheduler to answer before giving up (seconds).
CONNECT_TIMEOUT_S = 5.0
#: The Dask scheduler's default port.
DASK_PORT = 8786
_SCHEMES = ("tcp://", "tls://")
_INSTALL = "pip install 'airplan-qo[dask]' (or: pip install distributed)"


@attrs.define
class Backend:
    """A resolved executor: ``executor`` is None for this machine's own pool (or serial),
    ``slots`` how many runs it trains at once (for the time estimate), ``name`` how messages
    name it, ``client`` a Dask client opened here (closed by :meth:`close`) and ``address`` its
    scheduler's address."""

    executor: Executor | None
    slots: int
    name: str
    client: Any = None
    address: str | None = None

    @property
    def remote(self) -> bool:
        return self.executor is not None

    def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            try:
                client.close()
            except Exception:   # the scheduler went away: nothing left to release
                pass


def dask_address(spec: str) -> str:
    """The scheduler address of ``dask://HOST[:PORT]``, ``tcp://HOST:PORT`` or
    ``tls://HOST:PORT`` (ValidationError naming the value otherwise)."""
    text = spec.strip()
    scheme = "tcp://"
    if text.startswith("dask://"):
        rest = text[len("dask://"):]
    elif text.startswith(_SCHEMES):
        scheme, rest = text[:6], text[6:]
    else:
        raise ValidationError(
            f"unknown executor {spec!r}: use 'local' or a Dask scheduler, "
            "'dask://HOST:PORT' (or its address 'tcp://HOST:PORT')")
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep:
        host, port = rest.rstrip("/"), str(DASK_PORT)
    if not host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValidationError(f"executor {spec!r} is not a Dask scheduler address: use "
                              "'dask://HOST:PORT', e.g. dask://127.0.0.1:8786")
    return f"{scheme}{host}:{int(port)}"


def resolve(executor: Any, workers: int) -> Backend:
    """Check ``executor`` (see the module docstring) against ``workers`` and open it (a
    :class:`Backend` is returned as it is)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValidationError(f"workers must be a positive integer, got {workers!r}")
    if isinstance(executor, Backend):
        return executor
    if executor is None or executor == "local":
        return Backend(None, workers, f"{workers} local worker processes")
    if workers != 1:
        raise ValidationError("workers sets the number of local worker processes; with an "
                              "executor the executor's workers train (leave workers at 1)")
    if isinstance(executor, Executor):
        return Backend(executor, _slots(executor), _name(executor))
    if not isinstance(executor, str):
        raise ValidationError(f"executor must be 'local', a Dask scheduler address "
                              f"('dask://HOST:PORT') or a concurrent.futures.Executor, got "
                              f"{type(executor).__name__}")
    return _connect(dask_address(executor), executor)


def _connect(address: str, spec: str) -> Backend:
    try:
        from distributed import Client
    except ImportError:
        raise ValidationError(
            f"--executor {spec} needs dask.distributed, which is not installed: "
            f"{_INSTALL}") from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, asyncio.TimeoutError):
        raise ExecutionError(
            f"cannot reach the Dask scheduler at {address} within {CONNECT_TIMEOUT_S:g} s "
            "(is `dask scheduler` running there, and the port open?)") from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, asyncio.TimeoutError):   # training would wait forever
        client.close()
        raise ExecutionError(f"the Dask scheduler at {address} has no workers: start some "
                             f"with `dask worker {address} --nthreads 1`") from None
    slots = max(1, sum(client.nthreads().values()))
    return Backend(client.get_executor(pure=False), slots, f"the Dask scheduler at {address}",
                   client, address)


def _name(executor: Executor) -> str:
    client = getattr(executor, "_client", None)
    address = getattr(getattr(client, "scheduler", None), "address", None)
    return f"the Dask scheduler at {address}" if address else type(executor).__name__


def _slots(executor: Executor) -> int:
    """Runs an executor trains at once, where it says (a Dask executor, a pool); else 1."""
    client = getattr(executor, "_client", None)
    if client is not None and hasattr(client, "nthreads"):
        try:
            return max(1, sum(client.nthreads().values()))
        except Exception:
            return 1
    return max(1, int(getattr(executor, "_max_workers", 1) or 1))


# ---- the worker's side -----------------------------------------------------------------------

_DATASETS: OrderedDict[tuple, Any] = OrderedDict()
_DATASETS_LOCK = threading.Lock()
#: Datasets a worker keeps loaded between runs: a grid trains every candidate of one (workload,
#: seed) in a row, so the last two cover the runs it receives next without holding many copies.
_KEEP = 2


def _dataset(workload) -> Any:
    """The workload's dataset, loaded once per worker process and reused by the runs that
    follow (training only reads it); the key includes the data directory in effect."""
    import os

    from ..data import load

    key = (workload.dataset, int(workload.seed), os.environ.get("AIRPLAN_DATA_DIR"))
    with _DATASETS_LOCK:
        if key in _DATASETS:
            _DATASETS.move_to_end(key)
            return _DATASETS[key]
    data = load(workload.dataset, seed=workload.seed)
    with _DATASETS_LOCK:
        _DATASETS[key] = data
        while len(_DATASETS) > _KEEP:
            _DATASETS.popitem(last=False)
    return data


def one_torch_thread() -> None:
    """Make torch compute in one thread in the calling thread (several runs at once, each
    using every core, over-subscribe the machine: 30-45x slower on 2 cores). Dask workers run
    tasks in threads of their own, so this is done in the task itself, every time."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def on_worker(fn, *args):
    """Call ``fn(*args)`` with one torch thread: what an executor runs (``on_worker(
    train_cached, job)`` for each run)."""
    one_torch_thread()
    return fn(*args)


def start_pool(processes: int, warm: tuple = (), *, now: bool = True):
    """A pool of up to ``processes`` spawn worker processes that train runs
    (:func:`train_cached`), each set up by :func:`init_pool_worker`: one torch thread, SIGINT
    ignored while idle, the training code imported and the datasets of the workloads in
    ``warm`` (at most the last :data:`_KEEP` kept) loaded. With ``now`` all of them start at
    once: a worker process spends seconds importing torch, and started before the calling
    process plans its first workload that overlaps with the planning instead of delaying the
    first runs; otherwise they start one per run submitted while none is idle."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max(1, processes),
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=init_pool_worker, initargs=(tuple(warm),))
    if now:   # the pool starts a process per task submitted while none is idle: one each
        for _ in range(max(1, processes)):
            pool.submit(int)
    return pool


def init_pool_worker(warm: tuple = ()) -> None:
    """Set-up of a local worker process (:func:`start_pool`): that of
    :func:`~airplan_qo.runtime.execution.init_worker`, then the training code imported and the
    datasets of ``warm`` (workloads) loaded for the runs that follow. A dataset that fails to
    load here is left to the run that needs it, which reports the error."""
    from ..runtime import engine  # noqa: F401  (torch and the trainer, imported once here)
    from ..runtime.execution import init_worker

    init_worker()
    for workload in warm:
        try:
            _dataset(workload)
        except Exception:   # the run that needs it fails with the error, recorded as usual
            pass


def train_cached(job):
    """Train a :class:`~airplan_qo.runtime.execution.TrainJob` to the end, like
    :func:`~airplan_qo.runtime.execution.train` (the same trainer: the workload's partition of
    its dataset, the plan's topology, the job's RunConfig; bit for bit the same run), with the
    dataset loaded on this worker (the job carries only the workload's parameters) and kept for
    the runs that follow. Returns (RunResult, wall seconds, the dataset's loading included)."""
    from ..data import partition_dataset
    from ..plans.topology import build
    from ..runtime.engine import Trainer

    start = time.perf_counter()
    w = job.workload
    data = _dataset(w)
    part = partition_dataset(data, w.partition, w.clients, seed=w.seed, alpha=w.alpha)
    run = Trainer(job.config, data, part, build(job.spec)).run(None)
    return run, time.perf_counter() - start


__all__ = ["Backend", "CONNECT_TIMEOUT_S", "dask_address", "resolve", "one_torch_thread",
           "on_worker", "start_pool", "init_pool_worker", "train_cached"]
