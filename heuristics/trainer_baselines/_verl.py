"""verl's schedule (``_balance_batch`` + ``rearrange_micro_batches``) and its cap-respecting
retry, as pieces the baseline and the step planner's trainer start share.

verl splits the sequences over ranks by equal-count Karmarkar-Karp on cost; each rank asks for
``ceil(tokens / cap)`` micro-batches, the ranks agree on the MAX, and each rank splits its own
sequences into that many by Karmarkar-Karp on cost, ignoring the cap. The retry tries the next
count (``+ multiple_of``) while a micro-batch of several sequences of any rank breaks the cap,
up to the smallest rank's sequence count.

The retry is open-ended (a full split of every rank per count), so :class:`VerlRetry` computes
the same counts faster and can stop and resume: the ranks are split once, a count below a
rank's bin-packing lower bound is skipped (its Karmarkar-Karp split cannot fit then), a count
stops at the first rank that breaks the cap (the trainer splits every rank, then looks; which
count passes does not depend on that order, only the cost), the ranks likeliest to break tried
first, under an optional work budget and deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._karmarkar_karp import karmarkar_karp_lists
from ..bounds import min_bins_lower_bound
from ._packing import Schedule, equal_count, round_up

#: A split's fixed cost (the call, its heap set-up) in the unit of :func:`split_work`.
SPLIT_CALL_WORK = 125


def verl_ranks(costs: list[int], dp: int) -> list[list[int]]:
    """verl ``_balance_batch``: equal-count Karmarkar-Karp of the sequences over ranks on their
    cost; a batch that does not divide evenly is padded with zero-cost placeholders, dropped
    afterwards (ranks then differ by one sequence)."""
    return equal_count(costs, dp, 0)


def verl_first_count(tokens: list[int], ranks: list[list[int]], cap: int | None,
                     multiple_of: int) -> int:
    """Each rank's ``min(sequences, ceil(tokens / cap))``, the all-reduce MAX, rounded up to
    ``multiple_of`` (verl's ``num_batches_divided_by``)."""
    local = [min(len(r), 1 if cap is None else -(-sum(tokens[i] for i in r) // cap)) for r in ranks]
    return round_up(max(local), multiple_of)


def verl_split(members: list[int], costs: list[int], k: int) -> list[list[int]]:
    """One rank's ``rearrange_micro_batches``: Karmarkar-Karp on cost into k micro-batches (the
    cap is not looked at); fewer when k exceeds the rank's sequences (raw: verl asserts)."""
    bins = karmarkar_karp_lists([costs[i] for i in members], [1] * len(members), k, None)
    return [[members[j] for j in b] for b in bins if b]


def verl_order(micro_batches: list[list[int]], costs: list[int]) -> list[list[int]]:
    """verl's order of a rank's micro-batches: each sorted, heaviest first, then the light ones
    moved to both ends (verl's choice, to shorten the pipeline warm-up and cool-down)."""
    micro = [sorted(b) for b in micro_batches]
    loads = [sum(costs[i] for i in b) for b in micro]
    order = sorted(range(len(micro)), key=lambda b: (loads[b], micro[b][0]), reverse=True)
    order = order[::2][::-1] + order[1::2]
    return [micro[b] for b in order]


def split_work(items: int, bins: int) -> int:
    """The estimated work of a :func:`verl_split` of ``items`` sequences into ``bins``, in items
    times doublings (its heap over the items, its merges of bins-wide states), plus a fixed
    cost a call: the unit of :class:`VerlRetry`'s work budget."""
    return SPLIT_CALL_WORK + items * (items.bit_length() + bins.bit_length())


def breaks_cap(rank_bins: list[list[int]], tokens: list[int], cap: int | None) -> bool:
    """A micro-batch of several sequences holds more than ``cap`` tokens (verl's retry test)."""
    return cap is not None and any(len(b) > 1 and sum(tokens[i] for i in b) > cap for b in rank_bins)


@dataclass
class VerlRetry:
    """verl's count search where it stands: the sequences of each rank (computed once), the
    count to try next, the ranks in the order to split them (the one that broke the cap last
    first, then the most tokens first: the likeliest to break, so a count that fails costs one
    split, not ``dp``), and the splits at ``k`` done so far (so a search cut by its work budget
    resumes where it stopped, splitting no rank twice at a count)."""

    ranks: list[list[int]]
    k: int
    order: list[int]
    rows: dict[int, list[list[int]]] = field(default_factory=dict)
    bumped: bool = False  # k raised to the ranks' bin-packing bound

    @classmethod
    def start(cls, tokens: list[int], costs: list[int], dp: int, cap: int | None,
              multiple_of: int, ranks: list[list[int]] | None = None) -> VerlRetry:
        """At verl's first count, on its ranks (computed here unless given: the same
        equal-count split, e.g. one the caller already holds)."""
        ranks = verl_ranks(costs, dp) if ranks is None else ranks
        heavy = sorted(range(len(ranks)), key=lambda r: (-sum(tokens[i] for i in ranks[r]), r))
        return cls(ranks, verl_first_count(tokens, ranks, cap, multiple_of), heavy)

    def try_count(self, tokens: list[int], costs: list[int], cap: int | None,
                  work_budget: int | None = None, deadline: float | None = None,
                  seconds_per_work: float = 0.0) -> tuple[Schedule | None, int, str]:
        """Split the ranks at ``k`` in ``order`` until one breaks the cap. Returns (the schedule
        when none broke, work, "done" / "broke" / "work budget" / "clock"); a cut leaves the
        splits made so far in ``rows``. A split starts only within ``work_budget`` (None: no
        limit) and when the clock says it ends by ``deadline`` (its work times
        ``seconds_per_work``)."""
        work = 0
        for r in self.order:
            if r in self.rows:
                continue
            need = split_work(len(self.ranks[r]), self.k)
            if work_budget is not None and work + need > work_budget:
                return None, work, "work budget"
            if deadline is not None and time.perf_counter() + need * seconds_per_work > deadline:
                return None, work, "clock"
            work += need
            self.rows[r] = verl_split(self.ranks[r], costs, self.k)
            if breaks_cap(self.rows[r], tokens, cap):
                self.order.remove(r)
                self.order.insert(0, r)
                self.rows = {}
                return None, work, "broke"
        return [self.rows[r] for r in range(len(self.ranks))], work, "done"

    def retry(self, tokens: list[int], costs: list[int], cap: int | None, multiple_of: int,
              work_budget: int | None = None, deadline: float | None = None,
              seconds_per_work: float = 0.0, give_up: Callable[[int], bool] | None = None,
              ) -> tuple[Schedule | None, int, str]:
        """The retry from ``k`` on (a count past verl's first, which broke the cap): the next
        count while a micro-batch of several sequences of any rank breaks the cap, up to the
        smallest rank's sequence count. Counts below a rank's bin-packing bound are skipped (no
        split of that rank into fewer respects the cap, Karmarkar-Karp's neither), and the
        search stops at a count where ``give_up(k)`` (e.g. no count from there on can beat an
        incumbent). Returns (the schedule or None, work, "done" / "invalid" (no count up to the
        ceiling keeps the cap) / "hopeless" / "work budget" / "clock")."""
        if not self.bumped:
            self.bumped = True
            need = []
            for members in self.ranks:
                over = [tokens[i] for i in members if cap is not None and tokens[i] > cap]
                rest = [tokens[i] for i in members if cap is None or tokens[i] <= cap]
                need.append(len(over) + (min_bins_lower_bound(rest, cap) if rest and cap else 0))
            if max(need) > self.k:
                self.k += -(-(max(need) - self.k) // multiple_of) * multiple_of
            # The ranks whose bound is closest to the count are the likeliest to break it: first.
            at = {r: j for j, r in enumerate(self.order)}
            self.order.sort(key=lambda r: (-need[r], at[r]))
        ceiling = min(len(r) for r in self.ranks)
        work = 0
        while True:
            if self.k > ceiling:
                return None, work, "invalid"
            if give_up is not None and give_up(self.k):
                return None, work, "hopeless"
            left = None if work_budget is None else work_budget - work
            sched, more, how = self.try_count(tokens, costs, cap, left, deadline, seconds_per_work)
            work += more
            if how != "broke":
                return sched, work, how
            self.k += multiple_of


def verl_retry_schedule(tokens: list[int], costs: list[int], dp: int, cap: int | None,
                        multiple_of: int) -> Schedule:
    """verl with its retry, run to its end: the first count from verl's own at which no
    micro-batch of several sequences breaks the cap; when none up to the smallest rank's
    sequence count does, the last count verl tries, raw (its micro-batches in split order)."""
    state = VerlRetry.start(tokens, costs, dp, cap, multiple_of)
    first = state.k
    sched = state.try_count(tokens, costs, cap)[0]
    if sched is None:
        state.k += multiple_of
        sched = state.retry(tokens, costs, cap, multiple_of)[0]
    if sched is None:  # every count broke: verl stops at the last within the ceiling
        ceiling = min(len(r) for r in state.ranks)
        last = first + multiple_of * max(0, (ceiling - first) // multiple_of)
        sched = [verl_split(r, costs, last) for r in state.ranks]
    return sched
