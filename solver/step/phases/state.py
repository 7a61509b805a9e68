"""plan_step's search state: one dataclass that every phase reads and changes.

:class:`StepState` holds one call's inputs, its budget and deadlines (made once from the time
limit, :mod:`~seqpart.solver.step.budget` and the tuning table), the pool of valid starts, the
searches' results, the best schedule so far, the counts still to build and what ended the search
short; its methods are the steps the phases share (taking a start into the pool, reading the
clock, the incumbent). The phases are functions over it, one module each (:mod:`.starts`,
:mod:`.formula_search`, :mod:`.tiny_exact`, :mod:`.trainer_starts`, :mod:`.exact_choice`,
:mod:`.by_count`), run in order by :mod:`.run`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...options import SolverOptions
from ...plan import StepBoundSource
from ..bound import rank_maxima_seconds, scaled_bounds
from ..budget import (
    BUILD_WORK_PER_SEQUENCE,
    EXACT_SHARE,
    RANK_MAXIMA_SHARE,
    assembly_reserve,
    exact_reserve,
)
from ..makespan import OPS_PER_SECOND, Ordered, count_penalty
from ..model import StepInstance
from ..pipeline import PipelineModel, schedule_error
from ..search import CANDIDATES_PER_SECOND, schedule_objective
from ..starts import Row
from ..starts.ranks import counts_by_ranks, full_kk_fits, shared_kk_ranks
from ..starts.trainers import OpenEnded
from ..tiny_cpsat import exact_fits

__all__ = ["Best", "StepState", "is_given"]


def is_given(method: str) -> bool:
    """Whether a pool row is the caller's given schedule (``start j``) or a trainer's
    (``trainer:name``): the search weighs those apart, each in its own and seqpart's order."""
    return method.startswith(("start ", "trainer:"))


@dataclass
class Best:
    """The best schedule so far by the formula (at pp = 1, the step time)."""

    objective: int | None = None  # vpp x step time
    m: int = 0
    mb_of: np.ndarray | None = None
    method: str = ""


@dataclass(eq=False)
class StepState:
    """One plan_step call's state (the fields after ``exact_share`` are derived in
    ``__post_init__``, never passed)."""

    inst: StepInstance
    seconds: float
    t0: float
    options: SolverOptions
    engine: str  # "auto" (CP-SAT on tiny instances) or "heuristics"
    trainer_starts: bool | None
    model: PipelineModel
    #: One count to plan, with the formula's bounds of the whole instance (the count search).
    count: tuple[int, dict[int, int]] | None = None
    #: Until when the given and trainers' schedules' order searches may run (None: the final
    #: deadline): the count search lets them run into its own time.
    order_deadline: float | None = None
    #: The exact makespan's share of the time (pp > 1).
    exact_share: float = EXACT_SHARE
    #: The count search: the order search of each given and trainer's schedule already made
    #: at this count (by its count and assignment), kept across the count's searches.
    order_cache: dict[tuple[int, bytes], Ordered] | None = None

    # The budget: candidate evaluations for the formula's search, operations for the exact
    # makespan's phase; the deadlines, None in the repeatable mode.
    deadline: float | None = field(init=False)
    final_deadline: float | None = field(init=False)  # the exact makespan's (pp > 1)
    budget: int = field(init=False)
    spent: int = field(init=False, default=0)
    exact_work: int = field(init=False, default=0)
    exact_spent: int = field(init=False, default=0)  # what the exact phase counted
    bounds: dict[int, int] = field(init=False)  # the formula's bound of each count
    use_exact: bool = field(init=False)  # CP-SAT on tiny instances takes half the budget
    costs: np.ndarray = field(init=False)
    # The starts and the searches.
    pool: list[Row] = field(init=False, default_factory=list)
    constructed: list[str] = field(init=False, default_factory=list)  # valid starts of ours
    broken: list[str] = field(init=False, default_factory=list)  # starts breaking the contract
    open_ended: OpenEnded = field(init=False, default_factory=OpenEnded)
    searched: set[int] = field(init=False, default_factory=set)  # arrivals searched
    finals: list[Row] = field(init=False, default_factory=list)  # every search's result
    best: Best = field(init=False, default_factory=Best)
    best_cut_by_budget: bool = field(init=False, default=False)
    # pp > 1: the given and trainers' schedules ordered so far (by arrival), their work, and
    # those the clock left in their cheap order.
    fixed: dict[int, tuple[Row, Ordered]] = field(init=False, default_factory=dict)
    fixed_work: int = field(init=False, default=0)
    late: list[str] = field(init=False, default_factory=list)
    # The counts: to build (best first), built, not runnable by the pipeline schedule.
    pending: list[int] = field(init=False)
    tried: int = field(init=False, default=0)
    unusable: list[int] = field(init=False, default_factory=list)
    shared_ranks: bool = field(init=False)  # pp > 1 at cluster scale: counts_on_shared_ranks
    build: int = field(init=False)  # a count's constructions, in candidate evaluations
    nominal_build: float = field(init=False)
    count_wall: float = field(init=False)
    # What ended the search short (``StepPlan.stopped_by``), which bound the plan met, notes.
    clock_cut: bool = field(init=False, default=False)
    work_short: bool = field(init=False, default=False)
    clock_short: bool = field(init=False, default=False)
    interrupted: bool = field(init=False, default=False)
    bound_source: StepBoundSource = field(init=False, default="step_bound")
    notes: list[str] = field(init=False, default_factory=list)
    usable: Callable[[int], bool] = field(init=False)

    def __post_init__(self) -> None:
        inst, seconds, t0 = self.inst, self.seconds, self.t0
        # Kept back from the clock: the plan's assembly, and with pp > 1 the exact makespans,
        # sized for n micro-batches until the candidates' counts are known (fit_final_deadline).
        reserve = assembly_reserve(inst) + exact_reserve(inst, inst.n)
        self.deadline = None if self.options.deterministic else t0 + seconds - reserve
        # With pp > 1 the exact makespan's share of the time comes last: the rest must end before.
        self.final_deadline = self.deadline
        if self.deadline is not None and inst.pp > 1:
            self.deadline = t0 + (seconds - reserve) * (1 - self.exact_share)
        self.budget = max(20_000, int(seconds * CANDIDATES_PER_SECOND))
        # Of the formula: the search's proxy (exact at pp = 1). With pp > 1 their rank-maxima
        # refinement only orders the counts; it is left out when it would take a large share of
        # the limit (0.42 s at n=262,144, dp=1,024): decided from the input, not the clock.
        if self.count is None:
            refine = rank_maxima_seconds(inst) <= RANK_MAXIMA_SHARE * seconds
            self.bounds = scaled_bounds(inst, rank_maxima=refine)
        else:  # the whole instance's bounds were computed once; none is recomputed here
            m, bounds = self.count
            refine, self.bounds = True, {m: bounds[m]}
        if inst.pp > 1:
            self.exact_work = int(self.exact_share * self.budget / CANDIDATES_PER_SECOND
                                  * OPS_PER_SECOND)
            self.budget -= int(self.exact_share * self.budget)
        # Tiny instances (every count's model small): half the time is CP-SAT's, decided up front
        # so that the split does not depend on the clock.
        self.use_exact = self.engine == "auto" and exact_fits(inst, list(self.bounds))
        if self.use_exact:
            self.budget //= 2
        self.costs = np.asarray(inst.costs, dtype=object)
        self.build = BUILD_WORK_PER_SEQUENCE * inst.n
        # A count's constructions take about this long; on a loaded machine (or at small dp,
        # where each rank's split is long) the last count's wall time says more: the larger
        # guards the clock (a safety net only: it decides nothing on an unloaded machine).
        self.nominal_build = self.build / CANDIDATES_PER_SECOND
        self.count_wall = self.nominal_build
        # pp > 1 without the refinement (cluster scale in a short limit): the counts in the
        # order of their estimate on the Karmarkar-Karp ranks that rank_first splits at every
        # count (see counts_by_ranks), built while one split fits (counts_on_shared_ranks).
        self.shared_ranks = inst.pp > 1 and not refine and inst.size is None
        order = self.bounds
        if self.shared_ranks:
            order = counts_by_ranks(inst, shared_kk_ranks(inst, not full_kk_fits(inst, seconds)),
                                    list(self.bounds))
        self.pending = sorted(self.bounds,
                              key=lambda m: (order[m] * count_penalty(inst, self.model, m), m))
        self.usable = functools.cache(self._usable)

    # ----------------------------------------------------------------- shared steps

    def _usable(self, m: int) -> bool:
        """Checked lazily (compiling a count's schedule is O(pp*vpp*m)): only the counts met."""
        ok = self.inst.pp == 1 or schedule_error(self.inst.pp, self.inst.vpp, m, self.model) is None
        if not ok:
            self.unusable.append(m)
        return ok

    def fit_final_deadline(self) -> None:
        """With pp > 1, the exact makespan's deadline set by the micro-batches of the schedules
        in the pool (each evaluation is linear in them), not by n: at n = 262,144, dp = 2,048,
        pp = 4 that frees 0.16 s of the 1 s limit."""
        # Only at cluster scale (shared ranks): at n <= 4,096 the assembly after the deadline
        # needs that slack (bench_step's longest call went from 501.6 to 505.5 ms at 0.5 s).
        if self.final_deadline is None or not self.shared_ranks or not self.pool:
            return
        micro_batches = self.inst.dp_size * max(row.m for row in self.pool + self.finals)
        self.final_deadline = (self.t0 + self.seconds - assembly_reserve(self.inst)
                               - exact_reserve(self.inst, min(micro_batches, self.inst.n)))

    def out_of_clock(self, margin: float = 0.0) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline - margin

    def out_of_clock_final(self, margin: float = 0.0) -> bool:
        return self.final_deadline is not None and time.perf_counter() > self.final_deadline - margin

    def counted_seconds(self) -> float:
        """The work counted so far (candidates and exact makespan operations), in seconds at
        the rates that turn a limit into work."""
        return self.spent / CANDIDATES_PER_SECOND + self.exact_spent / OPS_PER_SECOND

    def add(self, method: str, m: int, mb_of: np.ndarray) -> None:
        """A valid start into the pool, scored by the formula."""
        if m not in self.bounds or not self.usable(m):
            return  # a count this search does not plan (one count only: the count search)
        if not is_given(method):
            self.constructed.append(method)
        inst = self.inst
        obj = schedule_objective(mb_of, self.costs, inst.dp_size * m, m, inst.overhead, inst.pp,
                                 inst.vpp, inst.size, inst.tokens)
        self.pool.append(Row(obj, len(self.pool), method, m, mb_of))

    def incumbent(self) -> int | None:
        values = [row.objective for row in self.pool]
        if self.best.objective is not None:
            values.append(self.best.objective)
        return min(values) if values else None

    def hopeless(self, m: int, onwards: bool) -> bool:
        """No valid schedule with count m (or any count from m on) beats the incumbent. With
        pp > 1 the formula's bounds do not bound the exact makespan: never."""
        top = self.incumbent()
        if top is None or self.inst.pp > 1:
            return False
        if onwards:
            return all(v >= top for q, v in self.bounds.items() if q >= m)
        return m not in self.bounds or self.bounds[m] >= top
