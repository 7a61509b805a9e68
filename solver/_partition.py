"""``partition``: the one entry point. Bounds first, then heuristics, then CP-SAT if time remains.

The contract, whatever the engine: exactly k non-empty micro-batches, none over the cap, every
sequence in exactly one, checked by :func:`check_plan` before it is returned; or an
:class:`InfeasibleError` that says whether no plan exists or none was found in time.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..heuristics import load_lower_bound, min_bins_lower_bound
from ..heuristics.bounds import load_lower_bound_full_pair, load_lower_bound_token_room
from ..heuristics.kernels import (
    argsort_desc,
    best_fit_with_room,
    fill_empty,
    first_fit_tree,
)
from .assemble import finish_plan
from .engines.budget_costs import (
    CAPPED_BALANCE_UP_TO,
    FFD_SECONDS_PER_ITEM,
    FIXED_SECONDS_PER_ITEM,
    LPT_SECONDS_PER_ITEM,
    PACK_SECONDS_PER_ITEM,
    SAFETY_NET_SLACK,
    SEARCH_SETUP_SECONDS_PER_ITEM,
    fallback_cost_seconds,
)
from .engines.count_search import count_items, count_share
from .engines.cpsat import solve_items
from .engines.heuristic_phase import (
    heuristic_plan,
)
from .engines.perturb import keep_improving
from .engines.prove import prove_items
from .engines.resplit import improve_by_groups
from .errors import InfeasibleError
from .options import (
    ENGINES,
    BestPlan,
    Budget,
    SolverOptions,
    Subproblem,
    as_options,
    as_seconds,
    pauses_gc,
)
from .plan import BoundSource, Plan
from .problem import Cost, Items, Problem, make_items, make_problem

#: One engine of a fixed count: ``(subproblem, incumbent, budget) -> incumbent``.
Engine = Callable[[Subproblem, BestPlan, Budget], BestPlan]


def _load_bound(items: Items, k: int, max_count: int | None) -> int:
    """The load lower bound, exact: int64 on the fast path, Python ints beyond it."""
    if not items.shift:
        counts = None if items.members is None else items.counts  # None: all ones
        return load_lower_bound(items.cost_array, k, counts=counts, max_count=max_count)
    c = sorted(items.exact, reverse=True)  # exact Python ints: the same bound, no wrap
    bound = max(-(-sum(c) // k), c[0])
    if len(c) > k:
        bound = max(bound, c[k - 1] + c[k])
    if max_count is not None and max_count > 1 and all(x == 1 for x in items.counts):
        bound = max(bound, c[0] + sum(c[len(c) - max_count + 1 :]))
    return bound


def _count_bound(items: Items, cap: int) -> int:
    """The bin-packing bound on the count, computed once per call (the count search and
    every fixed k ask for it)."""
    if cap not in items.memo:
        items.memo[cap] = min_bins_lower_bound(items.token_array, cap)
    return items.memo[cap]


def _fixed_k(
    items: Items,
    k: int,
    problem: Problem,
    budget: Budget,
    engine: str,
    options: SolverOptions,
    start: list[list[int]] | None = None,
    start_method: str = "best_fit_decreasing",
) -> BestPlan:
    cap = problem.cap
    n_items = len(items)
    # Messages speak of the caller's k: over-cap sequences alone take micro-batches of their own.
    n_over = len(problem.oversize)
    alone = f", {n_over} of them for over-cap sequences alone" if n_over else ""
    if k > n_items:
        raise InfeasibleError(
            f"k={k + n_over} micro-batches but only {n_items + n_over} placeable units (groups "
            f"count as one{alone}): use k <= {n_items + n_over} or split groups",
            proven=True,
        )
    max_count = sum(items.counts) // k if problem.equal_size else None
    lb = _load_bound(items, k, max_count)
    cost_only = lb
    if cap is not None and not items.shift and items.costs != items.tokens:
        # A cost other than tokens under a cap with little room: the heaviest items cannot sit
        # in full micro-batches under a low load, which the cost-only bounds cannot see.
        lb = load_lower_bound_token_room(items.token_array, items.cost_array, k, cap, lb)
        lb = max(lb, load_lower_bound_full_pair(items.token_array, items.cost_array, k, cap))
    source: BoundSource = "token_room" if lb > cost_only else "load"

    def check_count(need: int) -> None:
        if need > k:
            raise InfeasibleError(
                f"the token sums need at least {need + n_over} micro-batches under cap={cap} "
                f"(bin-packing bound{alone}), but k={k + n_over}: use k >= {need + n_over} or k=None",
                proven=True,
            )

    if cap is not None:
        # Large batches: the total first (one sum), the full count bound (a sort, ~0.13
        # us/item) only when the heuristics find no plan, since a plan found proves the
        # count enough by itself.
        if n_items <= CAPPED_BALANCE_UP_TO:
            check_count(_count_bound(items, cap))
        else:
            # An int64 sum is exact: make_problem refuses totals from 2**62 up.
            check_count(items.memo.get(cap, -(-int(items.token_array.sum()) // cap)))
        if problem.cost == Cost() and lb > cap:
            raise InfeasibleError(
                f"some micro-batch must hold at least {lb} tokens with k={k}, over cap={cap}: "
                "raise k or the cap",
                proven=True,
            )
    sub = Subproblem(items, k, cap, max_count, lb, source, options, start, start_method,
                     force_cp_sat=engine == "cp-sat")
    best = sub.unplanned()
    for stage in _stages(problem, engine, check_count):
        best = stage(sub, best, budget)
    note = _gap_note(best, cost_only, lb)
    if note:
        best.notes.append(note)
    return best


def _stages(problem: Problem, engine: str, check_count: Callable[[int], None]) -> list[Engine]:
    """The engines one fixed count runs, in order, each ``(subproblem, incumbent, budget) ->
    incumbent``: the heuristics; under a cap, the count search's packing when they found no
    plan; unless ``engine="heuristics"``, the proofs and CP-SAT; the perturbation rounds."""
    stages: list[Engine] = [heuristic_plan]
    if problem.cap is not None:
        stages.append(functools.partial(
            _packing_when_no_plan, check_count=check_count,
            search=engine != "heuristics" and problem.k is not None))
    if engine != "heuristics":
        stages.append(_prove_and_solve)
    stages.append(keep_improving)
    return stages


def _packing_when_no_plan(sub: Subproblem, best: BestPlan, budget: Budget, *,
                          check_count: Callable[[int], None], search: bool) -> BestPlan:
    """No valid plan from the heuristics under the cap: the count must be possible (else a
    proven error), and at (or near) the smallest count the constructions can miss a packing
    that the count search finds: pack k bins with it, then search from that plan. (With
    k=None the count search has already run in the count's search.)"""
    if best.bins is not None:
        return best
    assert sub.cap is not None
    check_count(_count_bound(sub.items, sub.cap))
    if sub.max_count is None and search and not sub.items.shift:
        packed = _packing_at(sub.items, sub.k, sub.cap, budget)
        if packed is not None:
            restart = dataclasses.replace(sub, start=packed, start_method="count_search")
            return heuristic_plan(restart, sub.unplanned(), budget)
    return best


def _prove_and_solve(sub: Subproblem, best: BestPlan, budget: Budget) -> BestPlan:
    """While the plan is not proven: the LP bound, the dive and the exact search (few
    sequences per micro-batch), a re-split of a plan they found, then CP-SAT."""
    if best.bins is not None and best.max_load <= best.lower_bound:
        return best
    if sub.items.shift:  # CP-SAT and the LP take int64 coefficients; scaled ones prove nothing
        best.notes.append("cp-sat skipped: costs beyond int64 (heuristics work exactly)")
        return best
    found_by = best.method
    best = prove_items(sub, best, budget)
    if best.method != found_by:  # a plan the proofs found: re-split it too
        best = improve_by_groups(sub, best, budget)
    if best.bins is None or best.max_load > best.lower_bound:
        best = solve_items(sub, best, budget)
    return best


#: A gap at least this large gets a note saying what is known of where it lies.
GAP_NOTE_ABOVE = 0.01


def _gap_note(best: BestPlan, cost_only: int, room: int) -> str | None:
    """Where a large gap lies, as far as the bounds tell: the part a stronger bound removed was
    in the bound; what remains may be in the plan or in the bound."""
    if best.bins is None or best.lower_bound <= 0 or best.max_load <= best.lower_bound:
        return None
    gap = best.max_load / best.lower_bound - 1
    if gap < GAP_NOTE_ABOVE:
        return None
    found = []
    if room > cost_only:
        found.append(f"the token-room bound is {room / cost_only - 1:.1%} above the cost-only bound "
                     "(that much of the cost-only gap was in the bound)")
    if best.lower_bound > room:
        found.append(f"the proofs raised the bound {best.lower_bound / room - 1:.1%} further")
    known = "; ".join(found) if found else "no stronger bound raised the counting bound"
    return (f"gap {gap:.2%} to the lower bound: {known}; the rest may be in the plan or in the "
            "bound (a longer time limit lets the LP bound and CP-SAT tell)")


def _packing_at(
    items: Items, k: int, cap: int, budget: Budget
) -> list[list[int]] | None:
    """k non-empty micro-batches under the cap from the count search (None: it found no
    packing into k or fewer within most of the time left)."""
    bins = best_fit_with_room(items.token_array, None, cap)[0]
    if len(bins) > k:
        found = count_items(items.tokens, cap, _count_bound(items, cap), bins,
                            budget, 0.8 * max(budget.left(), 0.0))
        if found is None or found.bins is None or len(found.bins) > k:
            return None
        bins = found.bins
    padded = [list(b) for b in bins] + [[] for _ in range(k - len(bins))]
    return fill_empty(padded, items.costs, items.counts, None)


def _search_k(
    items: Items,
    problem: Problem,
    budget: Budget,
    engine: str,
    options: SolverOptions,
) -> tuple[int, BestPlan, int, str]:
    """Smallest k with a valid plan: bounds give the floor, best fit decreasing the ceiling.

    A count below the ceiling is tried only while an attempt's estimated cost fits the time
    left; then the search goes straight to the ceiling, whose best-fit packing is a valid plan
    at once (so the answer never waits for the clock at any n)."""
    cap = problem.cap
    n_items = len(items)
    if cap is None:
        return 1, _fixed_k(items, 1, problem, budget, engine, options), 1, "optimal"
    floor = max(1, _count_bound(items, cap))
    budget.charge(PACK_SECONDS_PER_ITEM * n_items)
    bfd = best_fit_with_room(items.token_array, None, cap)[0]
    method = "best_fit_decreasing"
    if budget.fits(FFD_SECONDS_PER_ITEM * n_items):  # the two rarely differ: both if cheap
        budget.charge(FFD_SECONDS_PER_ITEM * n_items)
        ffd = first_fit_tree(items.token_array, None, cap, argsort_desc(items.token_array))
        if len(ffd) < len(bfd):
            bfd, method = ffd, "first_fit_decreasing"
    attempt_seconds = (LPT_SECONDS_PER_ITEM + SEARCH_SETUP_SECONDS_PER_ITEM) * n_items
    attempt_seconds += fallback_cost_seconds(n_items)
    notes: list[str] = []
    if len(bfd) > floor and not problem.equal_size and engine != "heuristics":
        # The LP bound and the LP-guided dive, with the time a plan at the ceiling leaves.
        # Not with equal sizes (bins then hold equal numbers, which the patterns ignore).
        # The LP dive's share depends on the batch (few sequences per micro-batch and a
        # small pricing table: most); the fixed-k attempts below keep what it leaves.
        seconds = min(count_share(items.tokens, cap, floor, budget) * budget.time_limit,
                      budget.left() - attempt_seconds)
        found = count_items(items.tokens, cap, floor, bfd, budget, seconds)
        if found is None or found.lower_bound < len(found.bins or bfd):
            budget.mark_ran_out()  # its allowance ended it (or left it out) short of a proof
        if found is not None:
            notes = found.notes
            floor = max(floor, found.lower_bound)
            if found.bins is not None and len(found.bins) < len(bfd):
                bfd, method = found.bins, "count_search"
    ceiling = len(bfd)
    last_error: InfeasibleError | None = None
    for k in range(floor, n_items + 1):
        if problem.equal_size and sum(items.counts) % k:
            floor += k == floor  # no equal split at this count: as good as proven
            continue
        at_ceiling = k == ceiling and not problem.equal_size
        if k > ceiling and not problem.equal_size:
            break
        out_of_time = not budget.fits(attempt_seconds)
        if out_of_time and not at_ceiling and not problem.equal_size:
            continue  # out of time: straight to the count best fit decreasing achieves
        try:
            # Below the ceiling a heuristic miss is not proof: CP-SAT decides when it can.
            best = _fixed_k(
                items, k, problem, budget, engine, options,
                start=bfd if at_ceiling else None, start_method=method,
            )
        except InfeasibleError as err:
            # Only a run of proofs from the floor up moves it: a count merely not found in
            # time stays a candidate for the minimum.
            if err.proven and k == floor:
                floor = k + 1
            last_error = err
            continue
        if best.bins is not None:
            best.notes.extend(notes)
            return k, best, floor, "optimal" if k <= floor else "upper_bound"
    if last_error is not None and floor > n_items:
        raise last_error
    raise InfeasibleError(
        f"no micro-batch count from {floor} to {n_items} gave a plan with these constraints"
        + (f" (last: {last_error})" if last_error else ""),
        proven=floor > n_items,
    )


def _checked_call(time_limit: Any, engine: Any, options: Any) -> SolverOptions:
    """The call's own arguments (the problem's are checked by make_problem); the options."""
    as_seconds(time_limit, "time_limit")
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: choose one of {', '.join(ENGINES)}")
    return as_options(options)


def _finish_reserve(n: int) -> float:
    """Seconds the engines leave for checking and assembling the plan (measured: 0.6 ms at
    n=2048) and for the last local-search step to end."""
    return 0.001 + 0.5e-6 * n


def _what_ran_out(budget: Budget, time_limit: float, elapsed: float) -> str:
    """Which budget ended the search, and after how long: in work timing the estimate of the
    work can run out long before the clock reaches ``time_limit``."""
    after = f"after {elapsed * 1000:.1f} ms" if elapsed < 1 else f"after {elapsed:.2f} s"
    if budget.by_clock and budget.seconds_left() <= 0:
        return f"the clock reached time_limit={time_limit}s ({after})"
    if not budget.by_clock and budget.left() <= 0:
        return (f"the work budget for time_limit={time_limit}s ran out {after} of wall time (work "
                "is estimated, not timed, so the same input gives the same answer)")
    if budget.cut:
        return f"the wall-clock safety net stopped the search {after} (a loaded machine)"
    return f"every search that fit ended {after}, inside time_limit={time_limit}s"


@pauses_gc
def partition(
    lengths: Any,
    k: int | None = None,
    cap: int | None = None,
    *,
    time_limit: float = 0.1,
    cost: str | Cost | tuple[int, int] = "tokens",
    equal_size: bool = False,
    groups: Sequence[Sequence[int]] | None = None,
    oversize: str = "error",
    engine: str = "auto",
    options: SolverOptions | None = None,
) -> Plan:
    """Split ``lengths`` into exactly ``k`` non-empty micro-batches, each at most ``cap`` tokens,
    minimising the largest load.

    Args:
        lengths: token count per sequence (list, numpy array or torch tensor of ints > 0).
        k: number of micro-batches; None for the smallest count a plan exists for.
        cap: max tokens per micro-batch (``max_tokens_per_gpu * cp_size``); None for no cap.
        time_limit: budget in seconds for the whole call. By default it is spent as estimated
            work, so the same input gives the same plan on any machine; the wall clock is a
            safety net (``plan.stopped_by`` is "safety_net" when it cut). See
            ``SolverOptions.timing``; ``plan.stopped_by`` says why the search ended.
        cost: what to balance: "tokens", "attention" (24576*l + l^2) or ``Cost(a, b)``. The cap
            always applies to tokens.
        equal_size: every micro-batch gets the same number of sequences (n divisible by k).
        groups: lists of indices that must share a micro-batch.
        oversize: "error" (default) rejects a sequence over the cap; "alone" gives each such
            sequence a micro-batch of its own (listed in ``Plan.oversize``).
        engine: "auto" (heuristics, then CP-SAT while unproven), "heuristics" (no model), or
            "cp-sat" (build the model even when it looks too large for the budget).
        options: a ``SolverOptions``: CP-SAT pass-through settings and the timing mode.

    Raises:
        ValueError / TypeError: bad input, naming the argument and the fix.
        InfeasibleError: no plan; ``.proven`` tells "none exists" from "none found in time".
            A plan is found whenever one exists and a construction (best fit or the capped
            balancer) or the search reaches it in the time given. With ``equal_size`` and
            ``groups`` together no construction is guaranteed to apply, so under a very short
            limit (a few ms) a feasible batch can raise with ``proven=False``: give it more time.
    """
    t0 = time.perf_counter()
    options = _checked_call(time_limit, engine, options)
    problem = make_problem(
        lengths, k, cap, cost=cost, equal_size=equal_size, groups=groups, oversize=oversize
    )
    budget = Budget.for_call(float(time_limit), options.mode, t0,
                             _finish_reserve(len(problem.tokens)), SAFETY_NET_SLACK)
    # The phases' shares are of the limit as given with k fixed, and of its float with k
    # searched (a numpy float32 limit rounds apart in the two): so plans stay as they were.
    budget.time_limit = time_limit if problem.k is not None else float(time_limit)
    # Checking the input, building the items and bounds: charged up front, by size.
    budget.charge(FIXED_SECONDS_PER_ITEM * len(problem.tokens))
    items = make_items(problem)
    n_over = len(problem.oversize)
    k_status, k_floor = "given", None
    if problem.k is not None:
        k_items = problem.k - n_over
        if k_items < (1 if len(items) else 0):
            rest = (_count_bound(items, problem.cap) if problem.cap is not None else 1) if len(items) else 0
            raise InfeasibleError(
                f"{n_over} sequences are over the cap and each needs its own micro-batch, "
                f"leaving {k_items} for the other {len(items)} units with k={problem.k}, which "
                f"need at least {rest}: use k >= {n_over + rest}",
                proven=True,
            )
        best = (
            _fixed_k(items, k_items, problem, budget, engine, options)
            if len(items)
            else BestPlan([], 0, 0, "oversize_only", [])
        )
    elif len(items):
        k_items, best, floor, k_status = _search_k(items, problem, budget, engine, options)
        k_floor = floor + n_over
    else:
        k_items, best, k_floor, k_status = 0, BestPlan([], 0, 0, "oversize_only", []), n_over, "optimal"
    if best.bins is None:
        raise InfeasibleError(
            f"no plan with k={k_items + n_over} under cap={problem.cap} was found: "
            f"{_what_ran_out(budget, time_limit, time.perf_counter() - t0)}, and none is proven "
            "impossible: raise time_limit or k"
            + (f" ({'; '.join(best.notes)})" if best.notes else ""),
            proven=False,
        )
    if budget.cut:
        best.notes.append(
            "the wall-clock safety net stopped a step before its work budget ran out (a "
            "loaded machine): this plan may differ from another run's"
        )
    return finish_plan(problem, items, best, k_items + n_over, k_status, k_floor, t0, budget)
