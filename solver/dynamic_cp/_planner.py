"""``plan_cp_step``: each micro-batch's CP degree, packing, step count and order together.

Phases, all on the one instance (see docs/dynamic-cp.md):

1. starts: Megatron-LM's greedy and seqpart's best fixed-CP plan at each degree dividing
   ``n_gpus`` (:func:`~seqpart.solver.plan_step` on the cost the model charges there), so the
   plan is never slower than either under the chosen sync model;
2. seqpart's own constructions: longest first at the cheapest degree, each where it least
   raises its step; the "wide" ones, where a long sequence takes the degree that fits one
   step's share of the work; and one by tokens;
3. local search on the barrier time from every start, fastest first; then, on small
   instances, the exact CP-SAT model (:mod:`._cpsat_model`) from the best schedule, or on the
   others perturbation rounds; under "dag", the fastest schedules' groups re-placed;
4. the fastest schedule under ``sync`` is returned; it is "optimal" when it meets the bound
   (or CP-SAT proved it). The search stops as soon as a schedule meets the bound.

Budget, after ``SolverOptions.timing``: "clock" (the default) spends the limit on a better plan
and ends by the clock; "strict" (``deterministic=True``) counts work (candidate evaluations,
``plan_step``'s own counted work, CP-SAT's deterministic time) and reads no clock, so the same
input gives the same plan on every run and rank; "work" counts the same with the clock as a
safety net.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from ..options import SolverOptions, as_options, as_seconds, pauses_gc
from ..plan import stop_reason
from ..tuning import CP_EXACT_SHARE as EXACT_SHARE
from ..tuning import CP_FIXED_SHARE as FIXED_SHARE
from ..tuning import CP_SAFETY_NET_SHARE as SAFETY_NET_SHARE
from ..tuning import CP_SEARCH_END_SHARE as SEARCH_END_SHARE
from ..tuning import EVALS_PER_SECOND, MORE_STARTS_SHARE
from ._bound import cp_lower_bound, min_steps
from ._cpsat_model import ExactResult, exact_fits, solve_exact
from ._fixed import fixed_cp_schedule, fixed_degrees
from ._greedy import GreedyError, megatron_dynamic_cp_schedule
from ._model import (
    CPInstance,
    CPStepPlan,
    Steps,
    _exact,
    find_cp_violations,
    make_cp_instance,
    sample_id_groups,
    schedule_time,
)
from ._placement import place_for_dag
from ._search import (
    Counter,
    barrier_time,
    construct,
    from_steps,
    local_search,
    perturb_search,
    to_steps,
    wide_degrees,
)

__all__ = ["plan_cp_step"]

#: The "wide" constructions: a long sequence gets the smallest degree whose time is within
#: this many times one step's share of the area bound (see ``wide_degrees``).
WIDE_SLACKS = ("1", "3/2", "2")
#: Under "dag", this many of the fastest schedules are re-placed (``place_for_dag``).
PLACED = 3


@pauses_gc
def plan_cp_step(lengths: Any, n_gpus: int, max_tokens_per_gpu: int, *, degrees: Any = None,
                 cost: Any = "attention", cp_comm: Any = 0, overhead: Any = 0,
                 sync: str = "barrier", time_limit: float = 1.0,
                 options: SolverOptions | None = None) -> CPStepPlan:
    """Plan one training step under dynamic context parallelism.

    Args:
        lengths: token count of every sequence of the global batch.
        n_gpus: the DP x CP ranks of one pipeline stage and tensor slice.
        max_tokens_per_gpu: tokens one GPU holds in a micro-batch (Megatron-LM's
            ``max_seqlen_per_dp_cp_rank``); a group of degree c holds ``c`` times as many.
        degrees: allowed group sizes; None: Megatron-LM's (powers of two c with 2c <= n_gpus,
            and n_gpus). A set that cannot tile ``n_gpus`` with aligned blocks is refused.
        cost: "attention", "tokens", ``Cost(a, b)``, ``(a, b)`` or a ``CostProfile`` (its cost
            and overhead): a sequence costs ``a*l + b*l^2``, spread over its group.
        cp_comm: exposed cost per KV token a GPU receives from its group (0: overlapped).
        overhead: fixed time of every micro-batch on every GPU, in the cost's units.
        sync: "barrier" (each step ends with its slowest group) or "dag" (a group starts when
            its members are free).
        time_limit: seconds for the whole call.
        options: ``SolverOptions(deterministic=True)`` for a plan repeatable on every rank.

    Returns:
        A :class:`CPStepPlan` that has passed the validator.
    """
    t0 = time.perf_counter()
    seconds = as_seconds(time_limit, "time_limit")
    assert seconds is not None
    options = as_options(options)
    inst = make_cp_instance(lengths, n_gpus, max_tokens_per_gpu, degrees=degrees, cost=cost,
                            cp_comm=cp_comm, overhead=overhead, sync=sync)
    _check_enough(inst)
    # SolverOptions.timing: "clock" ends the search at SEARCH_END_SHARE of the limit (validating and
    # timing every schedule found takes the rest) and spends the limit on a better plan; "strict"
    # (deterministic=True) counts work and reads no clock; "work" counts work with the clock at
    # SAFETY_NET_SHARE as a safety net (the plan then says stopped_by="safety_net").
    mode = options.mode
    counted = mode != "clock"
    work = int(seconds * (1 - FIXED_SHARE) * EVALS_PER_SECOND) if counted else 1 << 62
    max_steps = len(inst.lengths)  # a step runs one sequence at least
    small = exact_fits(inst, max_steps)
    search_end = SEARCH_END_SHARE * (1 - EXACT_SHARE) if small else SEARCH_END_SHARE
    if small:  # the search leaves the exact model its share
        work = int(work * (1 - EXACT_SHARE))
    end = t0 + seconds * (search_end if mode == "clock" else SAFETY_NET_SHARE)
    counter = Counter(work, None if mode == "strict" else lambda: time.perf_counter() > end)
    bound = cp_lower_bound(inst)
    pool = _starts(inst, seconds, options, counter, t0, bound)
    # Small instances: CP-SAT, not perturbation rounds, after the local search.
    found = _improve(inst, pool, counter, random.Random(options.seed), bound, perturb=not small)
    exact = _run_exact(inst, found, max_steps, seconds, options, t0, bound) if small else None
    return _finish(inst, found, counter, exact, counted, bound)


def _run_exact(inst: CPInstance, found: list[tuple[str, Steps, bool]], max_steps: int,
               seconds: float, options: SolverOptions, t0: float,
               bound: Fraction) -> ExactResult | None:
    """The exact model from the fastest schedule found, on the rest of the budget."""
    best = min((schedule_time(inst, steps), k) for k, (_, steps, _) in enumerate(found)
               if not find_cp_violations(inst, steps))
    hint = found[best[1]][1]
    horizon = int(best[0] * inst.scale)
    if inst.overhead:  # a step costs every GPU its overhead at least
        max_steps = min(max_steps, horizon // (inst.scale * inst.overhead))
    if best[0] <= bound or max_steps < len(hint):
        return None  # proven already
    # CP-SAT's own clock limit (none in "strict" timing), and the watchdog's stop ("clock").
    wall = None if options.mode == "strict" else t0 + seconds * (
        SEARCH_END_SHARE if options.mode == "clock" else SAFETY_NET_SHARE)
    deadline = wall if options.mode == "clock" else None
    share = seconds * (1 - FIXED_SHARE) * EXACT_SHARE  # CP-SAT's deterministic time
    return solve_exact(inst, hint, horizon, max_steps, min_steps(inst), share, options, wall,
                       deadline)


def _check_enough(inst: CPInstance) -> None:
    """Every GPU runs in every step: a group needs a sequence, so the widest tiling must do."""
    n, k = inst.n_gpus, len(inst.lengths)
    fewest = _fewest_groups(n, inst.degrees)
    if k < fewest:
        raise ValueError(
            f"{k} sequences cannot keep {n} GPUs busy: every tiling of {n} GPUs by degrees "
            f"{list(inst.degrees)} needs at least {fewest} groups, one sequence each; add "
            f"{n} to degrees (one group of all GPUs), use fewer GPUs, or add sequences")


def _fewest_groups(n: int, degrees: tuple[int, ...]) -> int:
    best: list[int | None] = [0] + [None] * n
    for s in range(n):
        if best[s] is None:
            continue
        for c in degrees:
            if s % c == 0 and s + c <= n:
                v = best[s] + 1  # type: ignore[operator]
                if best[s + c] is None or v < best[s + c]:  # type: ignore[operator]
                    best[s + c] = v
    assert best[n] is not None
    return best[n]  # type: ignore[return-value]


def _starts(inst: CPInstance, seconds: float, options: SolverOptions, counter: Counter,
            t0: float, bound: Fraction) -> list[tuple[str, Steps]]:
    """The greedy (always run: the plan is never behind it), seqpart's construction, the
    fixed-CP plans on their share, then the wide constructions and the construction by tokens
    while the budget's first part lasts."""
    pool: list[tuple[str, Steps]] = []
    if inst.degrees == _megatron_degrees(inst.n_gpus):
        with contextlib.suppress(GreedyError):  # where Megatron-LM fails, it is no start
            pool.append(("megatron-greedy", megatron_dynamic_cp_schedule(
                list(inst.lengths), inst.n_gpus, inst.m)))
    by_time = sorted(range(len(inst.lengths)), key=lambda i: (-inst.work(i), i))
    by_tokens = sorted(range(len(inst.lengths)), key=lambda i: (-inst.lengths[i], i))
    _construct_into(pool, inst, "pack-by-time", by_time, counter)
    if _meets(inst, [steps for _, steps in pool], bound):
        return pool  # optimal already
    degs = fixed_degrees(inst)
    share = seconds * FIXED_SHARE / max(1, len(degs))
    fixed_options = SolverOptions(deterministic=options.deterministic, timing=options.timing,
                                  seed=options.seed, workers=options.workers,
                                  pause_gc=options.pause_gc)
    for c in degs:
        if options.mode == "clock" and time.perf_counter() - t0 + share > seconds * SEARCH_END_SHARE:
            continue
        steps = fixed_cp_schedule(inst, c, share, fixed_options)
        if steps is not None:
            pool.append((f"fixed-cp{c}", steps))

    def early() -> bool:
        """Whether the further starts may still run: the search keeps the rest of the budget
        (by the work count, or by the clock in "clock" timing)."""
        if options.mode != "clock":
            return counter.done < counter.limit * MORE_STARTS_SHARE
        return time.perf_counter() - t0 < seconds * SEARCH_END_SHARE * MORE_STARTS_SHARE

    seen = {tuple(inst.min_degree(lo) for lo in inst.lengths)}  # pack-by-time's degrees
    for slack in WIDE_SLACKS:
        degree = wide_degrees(inst, min_steps(inst), Fraction(slack))
        chosen = tuple(degree(i) for i in range(len(inst.lengths)))
        if chosen not in seen and early():  # the same degrees would give the same schedule
            seen.add(chosen)
            _construct_into(pool, inst, f"pack-wide{slack}", by_time, counter, degree)
    if early():
        _construct_into(pool, inst, "pack-by-tokens", by_tokens, counter)
    return pool


def _construct_into(pool: list[tuple[str, Steps]], inst: CPInstance, name: str, order: list[int],
                    counter: Counter, degree: Callable[[int], int] | None = None) -> None:
    if counter.stopped:
        return
    state = construct(inst, order, counter, degree)
    if state is not None:
        pool.append((name, to_steps(state)))


def _megatron_degrees(n: int) -> tuple[int, ...]:
    from ._model import default_degrees

    return default_degrees(n)


def _improve(inst: CPInstance, pool: list[tuple[str, Steps]], counter: Counter,
             rng: random.Random, bound: Fraction,
             perturb: bool = True) -> list[tuple[str, Steps, bool]]:
    """Local search from every start, fastest first, then (``perturb``) perturbation rounds from
    the best local optimum, while the budget lasts and nothing meets the bound; under "dag",
    the fastest also re-placed."""
    out = [(name, steps, False) for name, steps in pool if not find_cp_violations(inst, steps)]
    ranked = sorted(out, key=lambda x: schedule_time(inst, x[1], "barrier"))
    _place_fastest(inst, out)
    # A schedule at the bound is optimal: nothing to search for. A barrier time at the bound is
    # (the dag time is never above it).
    target = int(bound * inst.scale)
    searched: list[tuple[int, str, list]] = []
    proven = _meets(inst, [steps for _, steps, _ in out], bound)
    for name, steps, _ in ranked:
        if counter.stopped or proven:
            break
        state = from_steps(inst, steps)
        done = local_search(inst, state, counter)
        out.append((name + "+search", to_steps(state), done))
        proven = _meets(inst, [out[-1][1]], bound)
        if done:
            searched.append((barrier_time(state), name, state))
    if perturb and searched and not counter.stopped and not proven:
        _, name, state = min(searched, key=lambda x: x[0])
        state, rounds = perturb_search(inst, state, counter, rng, target)
        if rounds:
            out.append((name + "+perturb", to_steps(state), False))
    _place_fastest(inst, out)
    return out


def _place_fastest(inst: CPInstance, out: list[tuple[str, Steps, bool]]) -> None:
    """Under "dag", the fastest schedules re-placed (groups and steps moved, not changed); each
    schedule once."""
    if inst.sync == "dag":
        names = {name for name, _, _ in out}
        fastest = sorted((x for x in out if not x[0].endswith("+placed")),
                         key=lambda x: schedule_time(inst, x[1]))[:PLACED]
        out += [(name + "+placed", place_for_dag(inst, steps), done)
                for name, steps, done in fastest if name + "+placed" not in names]


def _meets(inst: CPInstance, schedules: list[Steps], bound: Fraction) -> bool:
    """Whether one of ``schedules`` meets ``bound`` under the instance's sync model."""
    return any(schedule_time(inst, steps) <= bound for steps in schedules)


def _finish(inst: CPInstance, pool: list[tuple[str, Steps, bool]], counter: Counter,
            exact: ExactResult | None, counted: bool, model_bound: Fraction) -> CPStepPlan:
    if exact is not None and exact.steps is not None:
        pool = [*pool, ("exact", exact.steps, exact.proven)]
    valid = [(schedule_time(inst, steps), k, name, steps, done)
             for k, (name, steps, done) in enumerate(pool) if not find_cp_violations(inst, steps)]
    if not valid:
        raise ValueError("no valid schedule was found in the budget: raise time_limit")
    best_t, _, method, steps, done = min(valid, key=lambda x: (x[0], x[1]))
    bound = model_bound
    if exact is not None:  # CP-SAT's bound holds for every schedule no slower than its hint
        bound = max(bound, min(best_t, Fraction(exact.bound, inst.scale)))
        if exact.proven and exact.time is not None:
            bound = max(bound, Fraction(exact.time, inst.scale))
    status = "optimal" if best_t <= bound else "feasible"
    clock_cut = counter.stopped == "clock" or exact is not None and exact.clock_cut
    ran_out = counter.stopped == "work budget" or exact is not None and not exact.proven
    stopped_by = stop_reason(status == "optimal", safety_net=counted and clock_cut,
                             clock=not counted and (clock_cut or ran_out),
                             work=counted and ran_out)
    bound_source = "cpsat" if bound > model_bound else "degree_choice"
    degrees_used = tuple(sorted({len(r) for step in steps for r, _ in step}))
    baselines = {name: _exact(t) for t, _, name, _, _ in valid if "+" not in name and "pack" not in name}
    return CPStepPlan(
        steps=steps,
        sample_id_groups=sample_id_groups(steps, inst.n_gpus),
        step_time=_exact(best_t),
        lower_bound=_exact(bound),
        gap=float(Fraction(best_t) / bound - 1) if bound else 0.0,
        status=status,
        degrees_used=degrees_used,
        sync=inst.sync,
        method=method,
        stopped_by=stopped_by,
        bound_source=bound_source,
        baselines=baselines,
    )
