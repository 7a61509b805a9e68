"""plan_step's phases for the given and the trainers' schedules, on the search's state
(:class:`~.state.StepState`): each schedule into the pool when it keeps the
contract, the trainers' set-ups first, their open-ended parts resumed with what the search
leaves, and with pp > 1 each one's order search.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..budget import OWN_BUILD_SECONDS_PER_SEQUENCE, TRAINER_SHARE
from ..makespan import order_given
from ..starts import from_schedule
from ..starts.trainers import as_start, finish_open_ended, run_trainer_starts
from .state import StepState, is_given


def take(search: StepState, method: str, sched: Any) -> None:
    """A given or trainer's schedule into the pool when it keeps the contract."""
    found = (as_start if method.startswith("trainer:") else from_schedule)(sched, search.inst)
    if found is None or found[0] not in search.bounds:
        search.broken.append(method)
    else:
        search.add(method, *found)


def given_and_trainer_starts(search: StepState, starts: Sequence[Any]) -> None:
    """The caller's schedules, then every trainer's (with ``trainer_starts=None`` within
    the budget and the clock, cheapest first, the open-ended parts within
    ``TRAINER_SHARE``), each in the pool as soon as it is made."""
    for j, sched in enumerate(starts):
        take(search, f"start {j}", sched)
    if search.trainer_starts is not False:
        full = search.trainer_starts is True
        # The first count's constructions follow, and are usually far better: the clock
        # leaves them the time they take before the last deadline (with pp > 1 the exact
        # makespan's share lies between the two).
        deadline = None if full or search.deadline is None else min(
            search.deadline,
            search.final_deadline - OWN_BUILD_SECONDS_PER_SEQUENCE * search.inst.n)
        notes, work, search.open_ended = run_trainer_starts(
            search.inst, None if full else search.budget, deadline, search.hopeless,
            functools.partial(take, search), None if full else int(TRAINER_SHARE * search.budget))
        search.spent += work
        search.notes += notes
    if search.broken:
        search.notes.append(f"starts that break the contract, skipped: {', '.join(search.broken)}")
        search.broken = []


def order_given_starts(search: StepState) -> None:
    """pp > 1: the given and trainers' schedules in the pool get their order search now,
    not after the search: it runs in full (the plan is never behind one of them in the
    order seqpart finds for it), so the later phases' clock must see its time (six such
    searches took 0.14 s at n=1,024, dp=64, pp=2, vpp=4). Those that arrive later (the
    trainers' open-ended parts) get theirs in the exact phase
    (:mod:`.exact_choice`)."""
    if search.inst.pp == 1:
        return
    rows = [row for row in search.pool
            if is_given(row.method) and row.arrival not in search.fixed]
    until = search.final_deadline if search.order_deadline is None else search.order_deadline
    # A count's searches meet the same schedules again (its trainers run at the same multiple
    # each time, and often agree): with the count search's cache each is ordered once.
    fixed, work, late = order_given(search.inst, search.model, rows, until, search.order_cache)
    search.fixed.update((row.arrival, (row, ordered)) for row, ordered in fixed)
    search.fixed_work += work
    search.late += late


def finish_trainer_starts(search: StepState, note: bool = True) -> None:
    """The trainers' open-ended parts cut by their share resume with what the search left
    (the incumbent now rules out more of them); ``notes`` name those still cut."""
    state = search.open_ended
    if (state.prime is not None or state.retry is not None) and search.spent < search.budget \
            and not search.out_of_clock():
        search.spent += finish_open_ended(search.inst, state, search.budget - search.spent,
                                          search.deadline, search.hopeless,
                                          functools.partial(take, search))
    if note:
        search.notes += state.notes()


def trainers_not_run(search: StepState) -> list[str]:
    """The trainers' schedulers (``TRAINER_SCHEDULERS`` names) whose schedule the plan may be
    behind: set-ups the clock left out, open-ended parts still cut, and with pp > 1 those the
    clock left in their cheap order (their order search not run)."""
    late = {name.split(" ")[0].removeprefix("trainer:") for name in search.late
            if name.startswith("trainer:")}
    return sorted({*search.open_ended.not_run(), *late})

