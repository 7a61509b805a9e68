"""Solver options, the one budget type (:class:`Budget`) and the best-plan record: shared by
the orchestrator (``partition``) and the engines, so neither imports the other."""

from __future__ import annotations

import functools
import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

# The parameter names are checked against ortools' own message type.
import numpy as np
from ortools.sat.python import cp_model

from .plan import BoundSource, StopReason, stop_reason
from .problem import Items

#: Parameters that crash the process rather than fail: refused with the reason.
UNSAFE_PARAMETERS = {
    "repair_hint": "ortools 9.15 aborts the whole process on it (CHECK heuristics.fixed_search) "
    "with one worker, which budgets under 50 ms use",
    "catch_sigint_signal": "ortools 9.15 then leaves SIGINT at the OS default after the solve, "
    "so a later Ctrl-C kills the caller's process without a KeyboardInterrupt or its cleanup",
}


def check_parameters(parameters: dict[str, object]) -> None:
    """Reject unknown or unsafe CP-SAT parameters, or values of the wrong type, up front
    (naming the problem), so nothing fails inside a solve and costs the heuristic plan."""
    if not isinstance(parameters, dict):
        raise TypeError(
            "SolverOptions.cp_sat_parameters must be a dict of CP-SAT parameter names to "
            f"values, got {type(parameters).__name__}"
        )
    known = cp_model.CpSolver().parameters
    for name, value in parameters.items():
        if name in UNSAFE_PARAMETERS:
            raise ValueError(f"CP-SAT parameter {name!r} is refused: {UNSAFE_PARAMETERS[name]}")
        if not hasattr(known, name):
            raise ValueError(
                f"unknown CP-SAT parameter {name!r} in SolverOptions.cp_sat_parameters: see "
                "ortools' sat_parameters.proto for the names"
            )
        try:
            setattr(known, name, value)  # a scratch message: protobuf checks the type
        except (TypeError, ValueError):
            raise TypeError(
                f"CP-SAT parameter {name!r}={value!r} ({type(value).__name__}) has the wrong "
                "type for that field: see ortools' sat_parameters.proto for its type"
            ) from None


def new_cp_solver(workers: int, seed: int, log: bool) -> cp_model.CpSolver:
    """A CP-SAT solver as every engine here starts one. Its own SIGINT handler is off: with it,
    ortools 9.15 catches Ctrl-C during the solve and leaves SIGINT at the OS default after it,
    so the caller's next Ctrl-C would kill the process with no KeyboardInterrupt and none of
    its cleanup (a trainer's checkpoint handler, say). Without it a Ctrl-C during a solve is
    raised as KeyboardInterrupt when the solve returns."""
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.catch_sigint_signal = False
    params.num_workers = workers
    params.random_seed = seed
    params.log_search_progress = log
    return solver


#: The longest time limit or timeout taken, in seconds (about 116 days). Beyond it a limit is no
#: limit, and float and timedelta conversions start to overflow; "no limit" is not offered, since
#: a call without one could run for hours on a hard batch.
MAX_SECONDS = 10**7


def as_seconds(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    """``value`` as a positive, finite number of seconds (None when allowed), else a clear error."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        none = " or None" if allow_none else ""
        raise TypeError(f"{name} must be a number of seconds{none}, got {value!r} ({type(value).__name__})")
    if value != value or not value > 0:  # NaN, zero, negative
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if not value <= MAX_SECONDS:  # inf, and ints too large for a float
        shown = repr(value) if len(repr(value)) <= 24 else f"an int of {len(str(value))} digits"
        raise ValueError(
            f"{name}={shown} is too long: pass at most {MAX_SECONDS} seconds (about 116 days)"
            + ("; None waits for the process group's own timeout" if allow_none else "")
        )
    return float(value)


ENGINES = ("auto", "heuristics", "cp-sat")
#: How a call spends its time limit (see SolverOptions.timing).
TIMINGS = ("work", "strict", "clock")


@dataclass(frozen=True)
class SolverOptions:
    """How a call spends its time limit, and the knobs passed through to CP-SAT.

    ``timing`` says how ``time_limit`` is spent:

    - ``"clock"`` (default): the best plan within the limit. Every phase reads the wall clock,
      hands on what it leaves, and an unproven call keeps improving its plan until the limit
      (perturb-and-search rounds after the proofs and CP-SAT). The plan can differ from run to
      run and machine to machine: identical work was measured to take 1.4-2.9x as long from
      one call to the next on a 2-core machine, so no fixed amount of work both fills a limit
      and never overruns it.
    - ``"strict"``: repeatable. Each step is charged an estimate of its cost computed from the
      sizes and the work it did (local search counts the elements its vectorised operations
      process, CP-SAT runs on its deterministic time), and no clock decides anything: the same
      input gives the same plan on every run and machine. The estimates were calibrated to stay
      below the wall time, so such a call usually ends well before its limit, and on a loaded
      machine it can overrun it. ``deterministic=True`` selects it; code that every rank
      computes from the same data (the trainer drop-ins) uses it.
    - ``"work"``: the strict budget with the wall clock as a safety net (when the clock stops
      a step first, ``plan.stopped_by`` is "safety_net" and that plan may differ).
    """

    workers: int = 2
    seed: int = 0
    log: bool = False
    deterministic: bool = False
    #: Skip the model when it would have more boolean variables than this (build time alone
    #: would eat an online budget); a tuned CP-SAT run can still be asked for with more.
    max_model_vars: int = 400_000
    #: Any other CP-SAT parameter by name, e.g. {"linearization_level": 2}; applied last.
    cp_sat_parameters: dict[str, Any] = field(default_factory=dict)
    timing: str = "clock"
    #: Pause Python's cyclic garbage collector for the call (restored after). A collection
    #: that lands in the middle of a step added 20-45 ms to a 20 ms call (Karmarkar-Karp at
    #: n=2048 allocates enough to trigger one), which both broke the limit and made the
    #: safety net cut (an unrepeatable plan). The solver's objects hold no cycles, so nothing
    #: accumulates; set False if another thread of yours needs the collector meanwhile.
    pause_gc: bool = True

    def __post_init__(self) -> None:
        # numpy scalars are taken as the Python values they hold (they would wrap or fail later).
        for name in ("workers", "seed", "max_model_vars", "log", "deterministic", "pause_gc"):
            value = getattr(self, name)
            if isinstance(value, (np.integer, np.bool_)):
                object.__setattr__(self, name, value.item())
        if isinstance(self.workers, bool) or not isinstance(self.workers, int):
            raise TypeError(f"SolverOptions.workers must be an int >= 1, got {self.workers!r}")
        if self.workers < 1:
            raise ValueError(f"SolverOptions.workers must be an int >= 1, got {self.workers!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not (
            -(2**31) <= self.seed < 2**31
        ):
            raise TypeError(f"SolverOptions.seed must be an int (32-bit), got {self.seed!r}")
        for flag in ("log", "deterministic", "pause_gc"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(
                    f"SolverOptions.{flag} must be True or False, got {getattr(self, flag)!r}"
                )
        if isinstance(self.max_model_vars, bool) or not isinstance(self.max_model_vars, int):
            raise TypeError(
                f"SolverOptions.max_model_vars must be an int, got {self.max_model_vars!r}"
            )
        check_parameters(self.cp_sat_parameters)
        if self.timing not in TIMINGS:
            raise ValueError(
                f"SolverOptions.timing={self.timing!r}: choose one of {', '.join(TIMINGS)}"
            )

    @property
    def mode(self) -> str:
        """The timing in effect: ``deterministic=True`` means "strict"."""
        return "strict" if self.deterministic else self.timing


@dataclass
class BestPlan:
    """The best item-level plan so far, and what is known about it."""

    bins: list[list[int]] | None
    max_load: int
    lower_bound: int
    method: str
    notes: list[str]
    hint: list[list[int]] | None = None  # an invalid plan CP-SAT may repair, when none is valid
    #: Which bound gave ``lower_bound`` (``Plan.bound_source``): set wherever it is raised.
    bound_source: BoundSource = "load"

    def raise_bound(self, bound: int, source: BoundSource) -> bool:
        """``lower_bound`` raised to ``bound`` with its source, when that is higher."""
        if bound <= self.lower_bound:
            return False
        self.lower_bound, self.bound_source = bound, source
        return True


@dataclass(frozen=True)
class Subproblem:
    """What every engine of ``partition`` works on, at one fixed count: each engine is a
    function ``(subproblem, incumbent, budget) -> incumbent``, the incumbent a
    :class:`BestPlan` (the best plan so far and what is known of it), the budget that step's
    part of the call's :class:`Budget`."""

    items: Items
    k: int
    cap: int | None
    #: The most sequences a micro-batch may hold (``equal_size``), else None.
    max_count: int | None
    #: What the count is known to need before any engine ran: the load bound and its source.
    lower_bound: int = 0
    bound_source: BoundSource = "load"
    #: CP-SAT's settings and the seed of the perturbation rounds.
    options: SolverOptions = field(default_factory=lambda: SolverOptions())
    #: Where the heuristic phase starts from (None: best fit decreasing), and its name.
    start: list[list[int]] | None = None
    start_method: str = "best_fit_decreasing"
    #: engine="cp-sat": CP-SAT runs whatever the heuristics found and the budget says.
    force_cp_sat: bool = False

    def unplanned(self) -> BestPlan:
        """The incumbent before any engine: no plan, the subproblem's bound."""
        return BestPlan(None, 0, self.lower_bound, "", [], bound_source=self.bound_source)


@dataclass
class Budget:
    """A time limit, or a step's part of it, spent step by step: the one budget of a call.

    ``partition`` makes one from the caller's ``time_limit`` and the timing mode; each step
    gets a part of it (:meth:`allowance`, :meth:`child`) and asks it, never the clock, whether
    to go on. Units: the call's budget counts *estimated* seconds, each step charged what a
    deterministic cost model says it costs; a step's part counts the work units of the engine
    that spends it (LP cells, search nodes, subsets scored), so that the same part gives the
    same answer on every machine. ``deadline`` (a ``time.perf_counter()`` value) is where the
    clock enters: none in "strict" timing, the safety net in "work" timing, and the limit in
    "clock" timing (``by_clock``), where the call's own budget counts the clock's seconds
    (``on_clock``: ``left`` reads the clock and charges only record). ``cut`` records that the
    clock stopped a step before its units ran out (the result may then differ from another
    run's), ``ran_out`` that a step stopped on its units, or was not begun for lack of them:
    with them, :meth:`stop_reason` tells a budget that ran out from a search that ended on its
    own.
    """

    limit: float
    deadline: float | None = None
    #: The deadline is the limit ("clock" timing), not a safety net.
    by_clock: bool = False
    #: Units between readings of the clock in :meth:`out` (1: at every check); a search whose
    #: steps are cheap reads it less often.
    every: int = 1
    used: float = 0
    cut: bool = False
    ran_out: bool = False
    #: A Ctrl-C stopped a step (the caller's handler did not raise): nothing more is started.
    interrupted: bool = False
    #: The units are the clock's own seconds: :meth:`left` reads the clock (the call's budget
    #: in "clock" timing).
    on_clock: bool = False
    #: The call's ``time_limit``: the phases' shares are parts of it (a share of the limit,
    #: not of what is left, so a phase's work does not depend on how fast the others ran).
    time_limit: float = 0.0

    @classmethod
    def for_call(cls, time_limit: float, mode: str, started: float, reserve: float,
                 safety_net: float) -> Budget:
        """A call's budget: ``time_limit`` seconds from ``started`` (a ``time.perf_counter()``
        value) less ``reserve`` (what checking and assembling the plan take after the search).
        The clock's deadline follows the timing ``mode``: none in "strict"; in "work" the safety
        net, ``safety_net`` seconds past the estimate; in "clock" the limit itself, whose seconds
        the budget then counts."""
        end = started + time_limit - reserve
        return cls(
            limit=time_limit - reserve,
            deadline=None if mode == "strict" else end + (safety_net if mode == "work" else 0.0),
            by_clock=mode == "clock",
            on_clock=mode == "clock",
            time_limit=time_limit,
        )

    def charge(self, units: float) -> None:
        self.used += units

    def left(self) -> float:
        """Units not spent yet (negative once overspent); on the clock, seconds to the deadline."""
        if self.on_clock:
            return self.seconds_left()
        return self.limit - self.used

    def seconds_left(self) -> float:
        """Seconds to the deadline (infinite without one)."""
        return math.inf if self.deadline is None else self.deadline - time.perf_counter()

    def past_deadline(self) -> bool:
        """Whether the clock has passed the deadline (never, without one)."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    # -- the call's budget: what a step may take of it, and why the search ended --------------

    def fits(self, seconds: float) -> bool:
        """Whether a step estimated at ``seconds`` fits. When the estimate says yes but the
        wall clock says no, the safety net decides (and ``cut`` records it)."""
        if self.left() < seconds:
            self.ran_out = True
            return False
        if not self.by_clock and self.seconds_left() < seconds:
            self.cut = True
            return False
        return True

    def allowance(self, units: int, seconds: float, *, every: int = 1,
                  own_clock: bool = True) -> Budget:
        """A step's ``units`` of counted work, worth ``seconds`` of this budget. Its deadline:
        none in strict timing; else the call's, or ``seconds`` from now when sooner
        (``own_clock``; in clock timing always, where the clock is the step's limit)."""
        deadline = self.deadline
        if deadline is not None and (own_clock or self.by_clock):
            deadline = min(deadline, time.perf_counter() + seconds)
        return Budget(units, deadline, self.by_clock, every)

    def mark_cut(self) -> None:
        """The wall clock, not the estimate, stopped a step: the plan may differ from another
        run's (``plan.stopped_by`` says so). In "clock" timing the clock is the budget: it ran
        out."""
        if not self.by_clock:
            self.cut = True
        else:
            self.ran_out = True

    def mark_ran_out(self) -> None:
        """A step stopped on its share of the budget, or was left out for lack of it."""
        self.ran_out = True

    def stop_reason(self, proven: bool) -> StopReason:
        """Why the call's search ended (``Plan.stopped_by``): ``proven`` says the plan meets
        its bound (and the count, when searched, is proven smallest)."""
        short = self.ran_out or self.left() <= 0
        return stop_reason(proven, interrupted=self.interrupted, safety_net=self.cut,
                           clock=short and self.by_clock, work=short and not self.by_clock)

    # -- a step's part: counted units, the clock as the timing says ----------------------------

    def over(self, units: float) -> bool:
        """Whether ``units`` more are over what is left (then ``ran_out`` records it)."""
        if units > self.left():
            self.ran_out = True
            return True
        return False

    def clock_out(self, ahead: float = 0.0) -> bool:
        """Whether the clock is past the deadline, or will be ``ahead`` seconds from now (then
        ``cut`` records it)."""
        if self.deadline is not None and time.perf_counter() + ahead > self.deadline:
            self.cut = True
            return True
        return False

    def out(self) -> bool:
        """Whether it is used up: its units, or the clock (read every ``every`` units; then
        ``cut`` records it)."""
        if self.used >= self.limit:
            return True
        if self.deadline is not None and self.used % self.every == 0 and self.past_deadline():
            self.cut = True
            return True
        return False

    def child(self, share: float, most: int | None = None) -> Budget:
        """``share`` of what is left, units and clock alike (at most ``most`` units): a part
        of the step for one step of it. Charge the parent what the child used."""
        units = int(self.left() * share)
        deadline = self.deadline
        if deadline is not None:
            now = time.perf_counter()
            deadline = now + max(0.0, deadline - now) * share
        return Budget(units if most is None else min(units, most), deadline, self.by_clock,
                      self.every)


@contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Python's cyclic collector off inside the block, back to its state after (nesting-safe:
    only the outermost block that turned it off turns it on again)."""
    was_enabled = gc.isenabled()
    if pause and was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if pause and was_enabled:
            gc.enable()


F = TypeVar("F", bound=Callable[..., Any])


def pauses_gc(fn: F) -> F:
    """Run ``fn`` with the collector paused unless its ``options`` say ``pause_gc=False``
    (a bad ``options`` is left for ``fn`` itself to refuse with its own message)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        options = kwargs.get("options")
        pause = not (isinstance(options, SolverOptions) and not options.pause_gc)
        with gc_paused(pause):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def as_options(options: Any) -> SolverOptions:
    """``options`` or the defaults; anything but a SolverOptions is refused with the fix."""
    if options is None:
        return SolverOptions()
    if not isinstance(options, SolverOptions):
        raise TypeError(
            f"options must be a SolverOptions, got {type(options).__name__}: pass "
            "SolverOptions(**your_dict)"
        )
    return options
