"""Spend what is left of a clock-driven call: perturb the best plan and search again.

Why: once local search has converged and the proofs and CP-SAT have had their turn (or were
skipped: a model too large for the time left), an unproven call used to return early, leaving
most of a time limit the caller had granted. An iterated local search turns that time into
better plans: empty a few micro-batches (the heaviest and some others), deal their sequences
back by LPT under the cap, and run local search on the whole plan again; keep the result when
it is better. It runs in "clock" timing only, where the clock is what the caller asked for; the
repeatable timings keep their counted budget.
"""

from __future__ import annotations

import random

from ...heuristics.kernels import improve_lists
from ..options import BestPlan, Budget, Subproblem
from ..problem import Items, measure_bins

#: Micro-batches emptied per round besides the heaviest: a few, so a round is cheap and local.
RUINED_BINS = 3
#: Seconds kept back from the deadline per round: a round never starts without room to finish.
MIN_ROUND_SECONDS = 0.002


def keep_improving(sub: Subproblem, best: BestPlan, budget: Budget) -> BestPlan:
    """Perturb-and-search rounds on ``best`` until it is proven optimal or the clock runs out.

    Only for "clock" timing, a valid plan, unit sample counts (equal sizes keep their counts in
    local search, which a re-deal would break) and costs within int64; seeded by
    ``sub.options.seed``."""
    items, k, cap, max_count, seed = sub.items, sub.k, sub.cap, sub.max_count, sub.options.seed
    if (not budget.by_clock or budget.interrupted or best.bins is None or k < 2
            or max_count is not None or items.shift or best.max_load <= best.lower_bound):
        return best
    deadline = budget.deadline
    if deadline is None:
        return best
    rng = random.Random(seed)
    rounds = improved = 0
    plan = [list(b) for b in best.bins]
    while best.max_load > best.lower_bound and budget.seconds_left() > MIN_ROUND_SECONDS:
        rounds += 1
        start = _ruin_and_recreate(plan, items, cap, rng)
        if start is None:
            continue
        searched = improve_lists(items.tokens, items.costs, items.counts, start, cap, None,
                                 deadline, best.lower_bound).bins
        load = measure_bins(searched, k, items, cap, None)
        if load is not None and load < best.max_load:
            best.bins, best.max_load = searched, load
            best.method = best.method.split("+perturbed")[0] + "+perturbed"
            plan = [list(b) for b in searched]
            improved += 1
    if best.max_load > best.lower_bound:  # still unproven: the clock ended the rounds
        budget.mark_ran_out()
    if rounds:
        best.notes.append(f"perturb and search: {rounds} rounds, {improved} improved the plan")
    return best


def _ruin_and_recreate(
    plan: list[list[int]], items: Items, cap: int | None, rng: random.Random
) -> list[list[int]] | None:
    """Empty the heaviest micro-batch and a few random others, and deal their sequences back,
    heaviest first, to the lightest of those micro-batches they fit in (None: one did not fit)."""
    costs, tokens = items.costs, items.tokens
    loads = [sum(costs[i] for i in b) for b in plan]
    heaviest = max(range(len(plan)), key=loads.__getitem__)
    others = [b for b in range(len(plan)) if b != heaviest]
    chosen = [heaviest, *rng.sample(others, min(RUINED_BINS, len(others)))]
    freed = sorted((i for b in chosen for i in plan[b]), key=lambda i: (-costs[i], i))
    new = [list(b) for b in plan]
    for b in chosen:
        new[b] = []
    load = {b: 0 for b in chosen}
    room = dict.fromkeys(chosen, cap)
    for i in freed:
        fits = [b for b in chosen if room[b] is None or tokens[i] <= room[b]]
        if not fits:
            return None
        b = min(fits, key=lambda j: (load[j], rng.random()))
        new[b].append(i)
        load[b] += costs[i]
        if room[b] is not None:
            room[b] -= tokens[i]
    if not all(new[b] for b in chosen):
        return None
    return new

