"""Where ``airplan evaluate`` trains the runs it cannot reuse: this process, a local pool of
worker processes, or any :class:`concurrent.futures.Executor`, a Dask cluster's included.

``executor`` (Python) / ``--executor`` (CLI) takes

- ``None`` or ``"local"``: this machine (``workers`` = 1 trains in this process, more in a pool
  of worker processes; :class:`~.runner._Trainer`);
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
from concurrent.futures import Executor, Future
from typing import Any, Callable

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


#: What the fork server imports once, before it forks the worker processes (:func:`pool_context`).
PRELOAD = ("airplan_qo.runtime.engine", "airplan_qo.runtime.execution",
           "airplan_qo.evaluation.executors")


def pool_context():
    """How worker processes start: forked from a fork server that has imported the training
    code (:data:`PRELOAD`) once, on Linux; spawned elsewhere (macOS forks badly once system
    frameworks are loaded, which is why Python spawns there by default). A
    spawned worker imports torch and the package itself, 2-3 s on an idle core, and many at
    once share the cores: on a 16-core machine the first run started 7-9 s into the
    measurement with 4 or 16 of them (docs/evaluation.md, Parallel workers). A forked one
    starts with them imported, in milliseconds once the server runs. Both are fresh processes
    with none of the calling process's threads or open catalog."""
    import multiprocessing
    import sys

    methods = multiprocessing.get_all_start_methods()
    if sys.platform.startswith("linux") and "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))   # no effect once the server runs
        return ctx
    return multiprocessing.get_context("spawn")


def start_fork_server() -> bool:
    """Start :func:`pool_context`'s fork server now, without waiting for it, so that it
    imports the training code (7 s on a 16-core machine just started, of which torch 4 s)
    while the calling process does its own start-up; the pools made later fork from it.
    False where worker processes are spawned instead (nothing to start)."""
    import multiprocessing.forkserver

    if pool_context().get_start_method() != "forkserver":
        return False
    multiprocessing.forkserver.ensure_running()
    return True


class _Forwarded(Future):
    """A run submitted to a :class:`StartingPool` before its processes were up: pending until
    the pool's own future for it (``inner``) is done, and cancellable as long as that one is
    (no worker has taken it), so the calling process can still take it back."""

    def __init__(self, lock: threading.Lock):
        super().__init__()
        self.inner: Any = None
        self._sending = lock     # held while backlog runs are sent: cancel sees before or after

    def cancel(self) -> bool:
        with self._sending:
            if self.inner is not None and not self.inner.cancel():
                return False
            return super().cancel()


def start_pool(processes: int, warm: tuple = (), *, now: bool = True):
    """A pool of up to ``processes`` worker processes (:func:`pool_context`) that train runs
    (:func:`train_cached`), each set up by :func:`init_pool_worker`: one torch thread, SIGINT
    ignored while idle, the training code imported and the datasets of the workloads in
    ``warm`` (at most the last :data:`_KEEP` kept) loaded. With ``now`` all of them start at
    once, in the background (:class:`StartingPool`: the calling process plans its first
    workloads meanwhile, and runs it submits wait for the processes); otherwise they start one
    per run submitted while none is idle."""
    from concurrent.futures import ProcessPoolExecutor

    def make():
        pool = ProcessPoolExecutor(max(1, processes), mp_context=pool_context(),
                                   initializer=init_pool_worker, initargs=(tuple(warm),))
        if now:   # the pool starts a process per task submitted while none is idle: one each
            for _ in range(max(1, processes)):
                pool.submit(int)
        return pool
    return StartingPool(make) if now else make()


class StartingPool:
    """A process pool started in a background thread (starting processes blocks until the
    fork server has imported the training code, seconds): ``submit`` returns a future at once;
    runs submitted before the pool is up wait in a backlog and go to it, in order, when it is.
    A backlog run cancelled meanwhile (the calling process took it back to train it itself)
    is not sent. ``shutdown`` waits for the start, then shuts the pool down."""

    def __init__(self, make: Callable[[], Any]):
        self._pool: Any = None
        self._error: BaseException | None = None
        self._backlog: list[tuple[Any, Callable, tuple]] = []
        self._early: list[_Forwarded] = []     # every run submitted before the pool was up
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._start, args=(make,), daemon=True,
                                        name="airplan-pool-start")
        self._thread.start()

    def _start(self, make) -> None:
        try:
            pool = make()
        except BaseException as exc:   # raised to the runs waiting for it
            pool, self._error = None, exc
        with self._lock:
            self._pool = pool
            backlog, self._backlog = self._backlog, []
            for outer, fn, args in backlog:
                self._forward(outer, fn, args)

    def _forward(self, outer: "_Forwarded", fn, args) -> None:
        if outer.cancelled():
            return
        if self._error is not None:
            outer.set_exception(self._error)
            return
        outer.inner = inner = self._pool.submit(fn, *args)

        def done(f) -> None:
            if f.cancelled() or outer.cancelled():   # taken back: _Forwarded.cancel
                return
            if f.exception() is not None:
                outer.set_exception(f.exception())
            else:
                outer.set_result(f.result())
        inner.add_done_callback(done)

    def submit(self, fn: Callable, *args: Any):
        with self._lock:
            if self._pool is not None:
                return self._pool.submit(fn, *args)
            if self._error is not None:
                raise self._error
            outer = _Forwarded(self._lock)
            self._backlog.append((outer, fn, args))
            self._early.append(outer)
            return outer

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:      # not sent yet: nothing to take back from the pool
                for outer, _fn, _args in self._backlog:
                    Future.cancel(outer)
        self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        for outer in self._early:   # those the pool cancelled: nobody is left to wait for them
            if outer.inner is not None and outer.inner.cancelled():
                Future.cancel(outer)


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
           "on_worker", "pool_context", "start_fork_server", "start_pool", "StartingPool",
           "init_pool_worker", "train_cached"]
