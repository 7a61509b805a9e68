"""Ctrl-C during a long CP-SAT solve.

Python runs a signal handler only between bytecodes of the main thread, and during
``CpSolver.solve`` the main thread is inside C++: a Ctrl-C there is raised as KeyboardInterrupt
only when the solve returns, which for an offline budget of minutes means minutes. CP-SAT's own
handler (``catch_sigint_signal``) would stop it, but leaves SIGINT at the OS default afterwards
(see ``options.new_cp_solver``). So for long solves a watcher thread listens on Python's signal
wake-up fd, which the C-level handler writes to at once, and asks the solver to stop; the
KeyboardInterrupt then follows as usual, a moment later.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ortools.sat.python import cp_model

#: Shorter solves are left alone: the Ctrl-C waits at most this long, and a pipe and a thread
#: per call would be overhead in the millisecond budgets.
WATCH_FROM_SECONDS = 1.0


@dataclass
class Watch:
    """What the watcher did: ``stopped`` when a Ctrl-C ended the search early. A handler of the
    caller's that does not raise lets the solve's plan through: it may differ from another
    run's, and the caller's note should say so."""

    stopped: bool = False


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
