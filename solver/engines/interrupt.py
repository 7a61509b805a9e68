"""Ctrl-C during a long CP-SAT solve, and the clock's deadline.

Python runs a signal handler only between bytecodes of the main thread, and during
``CpSolver.solve`` the main thread is inside C++: a Ctrl-C there is raised as KeyboardInterrupt
only when the solve returns, which for an offline budget of minutes means minutes. CP-SAT's own
handler (``catch_sigint_signal``) would stop it, but leaves SIGINT at the OS default afterwards
(see ``options.new_cp_solver``). So for long solves a watcher thread listens on Python's signal
wake-up fd, which the C-level handler writes to at once, and asks the solver to stop; the
KeyboardInterrupt then follows as usual, a moment later.

In "clock" timing the solve must also end at an absolute deadline. CP-SAT's
``max_time_in_seconds`` counts from its own start, after the model build and load, and some of
its work checks the limit only between steps: a watchdog thread (one for the process) calls
``stop_search`` once the deadline has passed, whatever CP-SAT's own clock says.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from ortools.sat.python import cp_model

#: Shorter solves are left alone: the Ctrl-C waits at most this long, and a pipe and a thread
#: per call would be overhead in the millisecond budgets.
WATCH_FROM_SECONDS = 1.0
#: How often the deadline's watchdog repeats its stop until the solve returns.
STOP_RETRY_SECONDS = 0.001


@dataclass
class Watch:
    """What the watcher did: ``stopped`` when a Ctrl-C ended the search early. A handler of the
    caller's that does not raise lets the solve's plan through: it may differ from another
    run's, and the caller's note should say so."""

    stopped: bool = False
    #: The deadline's watchdog asked the solver to stop (the solve may have ended just before).
    timed_out: bool = False


@contextmanager
def stop_on_ctrl_c(solver: cp_model.CpSolver, seconds: float) -> Iterator[Watch]:
    """Stop ``solver``'s search on Ctrl-C while the block runs, when the solve may take at
    least WATCH_FROM_SECONDS. Only in the main thread, only while SIGINT has a Python handler,
    and only when nothing else (an asyncio loop, say) already owns the wake-up fd."""
    watch_state = Watch()
    if (
        seconds < WATCH_FROM_SECONDS
        or threading.current_thread() is not threading.main_thread()
        or not callable(signal.getsignal(signal.SIGINT))
    ):
        yield watch_state
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter's main thread after all
        previous = None
    if previous != -1:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        yield watch_state
        return

    def watch() -> None:
        while data := os.read(read_fd, 64):  # empty: the write end closed, the solve is over
            if signal.SIGINT in data:
                watch_state.stopped = True
                solver.stop_search()

    watcher = threading.Thread(target=watch, name="seqpart-ctrl-c", daemon=True)
    watcher.start()
    try:
        yield watch_state
    finally:
        signal.set_wakeup_fd(-1)
        os.close(write_fd)
        watcher.join()
        os.close(read_fd)


class _Watchdog:
    """One daemon thread that stops every deadline-guarded solve of the process when its
    deadline passes. One thread for all, started once: a thread per solve cost 0.05 ms to
    start and join at the median but 4 ms at the p99 on a loaded 2-core machine (the new
    thread must get the GIL), too much for a 20 ms call. Leaving a guard never waits for it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: dict[int, tuple[float, cp_model.CpSolver, Watch]] = {}
        self._thread: threading.Thread | None = None
        self._next = 0

    def add(self, deadline: float, solver: cp_model.CpSolver, watch_state: Watch) -> int:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():  # first use, or a fork
                self._thread = threading.Thread(target=self._run, name="seqpart-deadline",
                                                daemon=True)
                self._thread.start()
            self._next += 1
            self._jobs[self._next] = (deadline, solver, watch_state)
            self._cond.notify()
            return self._next

    def remove(self, key: int) -> None:
        with self._cond:  # after this no stop reaches the solver: the job is gone
            self._jobs.pop(key, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.perf_counter()
                wait: float | None = None
                for deadline, solver, watch_state in self._jobs.values():
                    if deadline <= now:
                        watch_state.timed_out = True
                        solver.stop_search()
                        # Again until the guard ends: a stop that lands before CP-SAT has set
                        # its search up (an overdue deadline) is otherwise lost.
                        wait = STOP_RETRY_SECONDS
                    elif wait is None or deadline - now < wait:
                        wait = deadline - now
                self._cond.wait(wait)  # None: until a job arrives

    def after_fork(self) -> None:
        """The child has no watchdog thread, and the lock may have been held at the fork."""
        self._cond = threading.Condition()
        self._jobs = {}
        self._thread = None


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG.after_fork)


@contextmanager
def stop_at_deadline(
    solver: cp_model.CpSolver, deadline: float | None, watch_state: Watch | None = None
) -> Iterator[Watch]:
    """Stop ``solver``'s search at ``deadline`` (a ``time.perf_counter()`` value) while the
    block runs; None: no stop. ``timed_out`` says whether the stop was sent. Measured: the
    stop is sent 3-6 ms after the deadline while CP-SAT runs (the watchdog thread waits for
    the GIL), so it backs up CP-SAT's own limit rather than replacing it."""
    watch_state = Watch() if watch_state is None else watch_state
    if deadline is None:
        yield watch_state
        return
    key = _WATCHDOG.add(deadline, solver, watch_state)
    try:
        yield watch_state
    finally:
        _WATCHDOG.remove(key)


@contextmanager
def guard_solve(
    solver: cp_model.CpSolver, seconds: float, deadline: float | None = None
) -> Iterator[Watch]:
    """Both guards around one ``solver.solve``: Ctrl-C (solves of WATCH_FROM_SECONDS or more)
    and, when ``deadline`` is given ("clock" timing only: a repeatable call must not depend on
    when a thread wakes), a stop at that deadline."""
    with ExitStack() as stack:
        watch_state = stack.enter_context(stop_on_ctrl_c(solver, seconds))
        stack.enter_context(stop_at_deadline(solver, deadline, watch_state))
        yield watch_state
