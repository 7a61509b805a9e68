"""The study engine on Ray: a study's tasks run on a Ray cluster, or on a local Ray.

:func:`ray_executor` joins the cluster at ``address`` (``"auto"``: the one this machine belongs
to) or starts a local Ray of ``num_cpus`` CPUs, and gives a :class:`RayExecutor`, which
:func:`seqpart.solver.study.runner.run_tasks` drives like the local process pool:

- each task asks Ray for ``task.cpus`` CPUs (the solver threads it runs), so a timed task gets
  its cores to itself on whichever node it lands on, and the untimed tasks are done before the
  timed ones start (the runner's rule);
- a payload's large parts go into the object store once each, by identity: the batch a
  study's methods share (a dataclass's long sequence field, such as an instance's lengths) is
  stored once however many tasks and instances use it, not once per task, and each worker
  fetches it once for the tasks it runs;
- results come back to the driver as each task finishes; the driver alone writes
  ``results.jsonl``, so resume, merge, summary and plots are the same as with the local pool;
- a worker (or node) that dies is retried by Ray up to ``retries`` times; after that the task
  gets a failure record, which the next run retries. A task is never silently lost. An error
  raised by the runner itself stops the study, as it does on the local pool;
- Ctrl-C stops the run: nothing more is submitted, the driver disconnects, and Ray stops the
  job's outstanding tasks (a local Ray is shut down). The store keeps every record written so
  far, whole. ``ray.cancel`` is not used: in Ray 2.x a cancel that races with the task's
  completion can abort the driver ("Tried to complete task that was not pending"). When the
  caller connected to Ray before (the connection is theirs and stays open), the tasks already
  submitted, at most twice the cluster's CPUs, run to their end and their records are dropped.

Ray is an optional extra, imported only here and only when asked for: ``pip install
'seqpart[ray]'``. On a cluster every node needs seqpart installed (the same version as the
driver), like any library the tasks import.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import os
import signal
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import UsageError

#: Ray's retries of a task whose worker process or node died, before it is recorded as failed.
DEFAULT_RETRIES = 2
#: Sequences shorter than this travel inline with the task; longer ones go to the object store.
SHARE_MIN = 16
#: Untimed one-CPU tasks per Ray task, at most (an untimed study's tasks take milliseconds,
#: about what Ray's own per-task work costs).
CHUNK_MAX = 16
_SCALARS = (bool, int, float, str, bytes, type(None))


#: Set before Ray is first imported when this process starts a local Ray: Ray then binds its
#: services to the loopback address (its default on Linux is the machine's own network address,
#: reachable from outside). Joining a cluster (``--address``) leaves it alone.
LOCAL_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def import_ray(local: bool = False) -> Any:
    """The ``ray`` module, or a :class:`UsageError` that names the extra to install. ``local``:
    this process will start a single-machine Ray, kept on the loopback address."""
    if local:
        for key, value in LOCAL_RAY_ENV.items():
            os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError:
        raise UsageError("the Ray executor needs Ray, which is not installed: "
                         "pip install 'seqpart[ray]'") from None
    return ray


@contextmanager
def ray_executor(address: str | None = None, num_cpus: int | None = None,
                 retries: int = DEFAULT_RETRIES) -> Iterator[RayExecutor]:
    """A :class:`RayExecutor` on the cluster at ``address``, or on a local Ray of ``num_cpus``
    CPUs (None: all cores) started here and shut down on exit. When this process is already
    connected to Ray (``ray.init`` was called), that connection is used and left open."""
    ray = import_ray(local=address in (None, "local"))
    started = not ray.is_initialized()
    if started:
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        if address in (None, "local"):
            with _sigint_ignored():
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **quiet)
        else:
            _check_reachable(address)
            try:
                ray.init(address=address, **quiet)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise UsageError(f"--address {address}: no Ray cluster to join there "
                                 f"({' '.join(str(err).split())[:200]})") from None
    try:
        yield RayExecutor(ray, retries)
    finally:
        if started:
            # Ends this driver's job: Ray stops its tasks still queued or running (Ctrl-C).
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """A UsageError unless something accepts connections at ``address``'s host and port: Ray
    itself keeps retrying an address nothing answers for minutes."""
    if address == "auto":  # the cluster this machine belongs to: Ray finds it, or says so
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--address {address}: use HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as err:
        raise UsageError(f"--address {address}: no Ray cluster answers there "
                         f"({err.strerror or type(err).__name__})") from None


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ctrl-C at a terminal reaches every process of its group, and a local Ray's processes
    are in the driver's: started while SIGINT is ignored, they (and the workers they start)
    keep ignoring it, as the local pool's workers do, and the driver alone stops the run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)


class RayExecutor:
    """Runs tasks as Ray tasks (see the module doc); made by :func:`ray_executor`."""

    def __init__(self, ray: Any, retries: int = DEFAULT_RETRIES) -> None:
        self._ray = ray
        self.retries = retries
        self._execute = ray.remote(_execute)
        self._apply = ray.remote(_apply)
        self._options: dict[int, Any] = {}
        #: id(part) -> (part, its object ref): the part is kept alive so its id stays its own.
        self._shared: dict[int, tuple[Any, Any]] = {}
        #: Objects this executor put into the object store (each shared part once).
        self.puts = 0

    def at_a_time(self, width: int, cpus: int) -> int:
        """Tasks of ``cpus`` CPUs the cluster runs at once: each node's CPUs // cpus, summed."""
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        return max(1, sum(int(n["Resources"].get("CPU", 0)) // max(1, cpus) for n in nodes))

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` as Ray tasks of one CPU each (order kept)."""
        ray = self._ray
        fn_ref = ray.put(fn)
        refs = [self._apply.options(max_retries=self.retries).remote(fn_ref, x) for x in items]
        try:
            return list(ray.get(refs))
        except ray.exceptions.RayTaskError as err:
            raise err.as_instanceof_cause() from None

    def stream(self, call: Callable[[Any], dict[str, Any]], tasks: Sequence[Any], width: int,
               failed: Callable[[Any, str], dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``call(task)`` of every task on Ray, the records yielded as they finish.

        The cluster's CPUs set how many run at once; twice as many are submitted, so no CPU
        waits for the driver, and no more, so Ctrl-C leaves little behind. ``width`` (the local
        pool's process count) does not bound a cluster. Untimed one-CPU tasks go in chunks of
        up to :data:`CHUNK_MAX` per Ray task (a few per CPU in all), which spreads Ray's
        per-task cost; a timed task is always a Ray task of its own."""
        ray = self._ray
        if not tasks:
            return
        call_ref = ray.put(call)
        self.puts += 1
        slots = self.at_a_time(width, min(t.cpus for t in tasks))
        size = 1
        if not any(t.exclusive or t.cpus != 1 for t in tasks):
            size = max(1, min(CHUNK_MAX, len(tasks) // (4 * slots)))
        chunks = (list(tasks[i:i + size]) for i in range(0, len(tasks), size))
        out: dict[Any, list[Any]] = {}  # object ref -> its chunk of tasks
        while True:
            for chunk in itertools.islice(chunks, 2 * slots + 2 - len(out)):
                out[self._submit(call_ref, chunk)] = chunk
            if not out:
                return
            ray.wait(list(out), num_returns=1)
            ready, _ = ray.wait(list(out), num_returns=len(out), timeout=0)
            for ref in ready:
                yield from self._outcome(ref, out.pop(ref), failed)

    def _submit(self, call_ref: Any, chunk: list[Any]) -> Any:
        cpus = chunk[0].cpus
        options = self._options.get(cpus)
        if options is None:
            # retry_exceptions=False: Ray retries a dead worker, never the runner's own error.
            options = self._options[cpus] = self._execute.options(
                num_cpus=cpus, max_retries=self.retries, retry_exceptions=False)
        layout, parts = [], []
        for task in chunk:
            spread = isinstance(task.payload, tuple)
            mine = task.payload if spread else (task.payload,)
            layout.append((dataclasses.replace(task, payload=None), spread, len(mine)))
            parts.extend(self._part(p) for p in mine)
        # One argument for the whole chunk: Ray serializes each argument on its own.
        return options.remote(call_ref, layout, parts)

    def _outcome(self, ref: Any, chunk: list[Any], failed: Callable[[Any, str], dict[str, Any]]
                 ) -> list[dict[str, Any]]:
        ray = self._ray
        try:
            return [dict(r) for r in ray.get(ref)]
        except ray.exceptions.RayTaskError as err:
            # The runner raised: stop as the local pool does, with the runner's own error.
            raise err.as_instanceof_cause() from None
        except ray.exceptions.TaskCancelledError:
            raise
        except ray.exceptions.RayError as err:  # the worker or its node died, an object was lost
            why = f"{type(err).__name__} after {self.retries} retries: "
            why += " ".join(str(err).split())[:300]
            return [failed(task, why) for task in chunk]

    def _part(self, obj: Any) -> Any:
        """What travels for one payload part. Small values go inline. A dataclass goes inline
        as a shell whose long sequence fields are object refs, each put once: a batch shared
        by several instances (one per cap and k) and all their methods' tasks is stored once,
        and a worker fetches it once (:func:`_fetch`). Anything else is put once too and
        travels as its ref."""
        if _small(obj):
            return obj
        hit = self._shared.get(id(obj))
        if hit is None:
            if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
                shell = copy.copy(obj)
                for f in dataclasses.fields(obj):
                    value = getattr(obj, f.name)
                    if _long(value):
                        object.__setattr__(shell, f.name, self._put(value))
            else:
                shell = self._put(obj)
            hit = self._shared[id(obj)] = (obj, shell)
        return hit[1]

    def _put(self, obj: Any) -> Any:
        hit = self._shared.get(id(obj))
        if hit is None:
            hit = self._shared[id(obj)] = (obj, self._ray.put(obj))
            self.puts += 1
        return hit[1]


def _small(obj: Any) -> bool:
    if isinstance(obj, _SCALARS):
        return True
    return isinstance(obj, (tuple, list)) and len(obj) < SHARE_MIN and all(
        isinstance(x, _SCALARS) for x in obj)


def _long(obj: Any) -> bool:
    return hasattr(obj, "__len__") and not isinstance(obj, (str, bytes, dict)) and len(obj) >= SHARE_MIN


#: In a worker: the immutable shared parts it fetched lately, by object id (a study's tasks
#: come instance by instance, so one batch serves several tasks in a row).
_FETCHED: OrderedDict[str, Any] = OrderedDict()
_FETCHED_MAX = 64


def _fetch(ref: Any) -> Any:
    import ray

    key = ref.hex()
    if key in _FETCHED:
        _FETCHED.move_to_end(key)
        return _FETCHED[key]
    value = _restore(ray.get(ref))
    # Kept only when no task can change it for the next (each fetch of a list is a new copy).
    if isinstance(value, (tuple, str, bytes, frozenset)):
        _FETCHED[key] = value
        if len(_FETCHED) > _FETCHED_MAX:
            _FETCHED.popitem(last=False)
    return value


def _restore(part: Any) -> Any:
    """A shared part, or a shared dataclass's fields, fetched back from the object store (in
    the worker)."""
    import ray

    if isinstance(part, ray.ObjectRef):
        return _fetch(part)
    if not (dataclasses.is_dataclass(part) and not isinstance(part, type)):
        return part

    whole = None
    for f in dataclasses.fields(part):
        value = getattr(part, f.name)
        if isinstance(value, ray.ObjectRef):
            whole = whole or copy.copy(part)
            object.__setattr__(whole, f.name, _fetch(value))
    return whole or part


def _execute(call: Callable[[Any], dict[str, Any]], layout: list[tuple[Any, bool, int]],
             parts: list[Any]) -> list[dict[str, Any]]:
    """A chunk of tasks, in a Ray worker: each payload put back together, then the runner's
    call. ``layout`` holds each task without its payload, whether the payload is a tuple, and
    how many of ``parts`` are its own."""
    records, at = [], 0
    for shell, spread, count in layout:
        restored = tuple(_restore(p) for p in parts[at:at + count])
        at += count
        records.append(call(dataclasses.replace(shell, payload=restored if spread else restored[0])))
    return records


def _apply(fn: Callable[[Any], Any], item: Any) -> Any:
    return fn(item)
