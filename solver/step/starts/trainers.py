"""The trainers' own schedules as starts for step planning, cheap enough to run at every size.

The schedules themselves are computed once, in :mod:`seqpart.heuristics.trainer_baselines`
(the baselines call the same functions): first-fit by a max-tree, the heaviest split from a
heap, slime's micro-batches shared by ``slime_rr`` and ``slime_kk``, prime-rl's resumable swap
refinement (:class:`~seqpart.heuristics.trainer_baselines.PrimeRefinement`) and verl's count
search (:class:`~seqpart.heuristics.trainer_baselines.VerlRetry`), which stops and resumes
under a work budget. ``tests/solver/step/test_trainer_starts.py`` checks that the starts are
the baselines' schedules.

What is plan_step's is here: verl's ranks taken from the instance (the ones ``rank_first``
splits, computed once), the trainers' work in the step search's units and each one's set-up
when its estimate fits the budget (deterministic; the clock only a safety net), the
open-ended parts (prime-rl's refinement, verl's retry) within a share of the budget and
dropped once they cannot beat the incumbent (:func:`run_trainer_starts`), resumed with what
the search leaves (:func:`finish_open_ended`), and the vectorised check of a schedule
(:func:`as_start`).

Only the micro-batch *sets* matter for a start (the model's rank time ignores their order), so
verl's order within a rank is not reproduced (its micro-batches stay in split order).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ....heuristics.trainer_baselines import (
    PrimeRefinement,
    VerlRetry,
    deal,
    megatron_schedule,
    prime_rl_bins,
    slime_bins,
    slime_kk_ranks,
    slime_rr_ranks,
    split_work,
)
from ..model import StepInstance
from ..search import CANDIDATES_PER_SECOND
from .ranks import kk_ranks

Schedule = list[list[list[int]]]
#: ``hopeless(m, onwards)``: no valid schedule with count m (or any count from m on) can beat
#: the incumbent.
Hopeless = Callable[[int, bool], bool]


def slime_starts(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int
) -> list[tuple[str, Schedule]]:
    """slime's micro-batches, built once, dealt both ways: ``slime_rr`` and ``slime_kk``."""
    bins = slime_bins(tokens, dp, cap, multiple_of)
    return [("slime_rr", deal(bins, slime_rr_ranks(len(bins), dp))),
            ("slime_kk", deal(bins, slime_kk_ranks(bins, costs, dp)))]


def prime_rl_start(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int,
    hopeless: Hopeless,
) -> PrimeRefinement | None:
    """prime-rl's refinement at its starting point. None when it cannot be valid (too few
    sequences to split to a multiple of ``dp * multiple_of``: prime-rl pads) or cannot beat the
    incumbent at its count (then its Karmarkar-Karp is not run)."""
    bins = prime_rl_bins(tokens, costs, dp, cap, multiple_of)
    k = len(bins)
    if k % (dp * multiple_of) or hopeless(k // dp, False):
        return None
    return PrimeRefinement.deal(bins, costs, dp)


def start_verl(
    tokens: list[int], costs: list[int], dp: int, cap: int | None, multiple_of: int,
    ranks: list[list[int]] | None = None,
) -> tuple[list[tuple[str, Schedule]], VerlRetry | None, int]:
    """verl's first count, on ``ranks`` when given (the same equal-count ranks rank_first
    splits, :func:`~seqpart.solver.step.starts.ranks.kk_ranks`). Returns ([("verl", s),
    ("verl_retry", s)], None, work) when no micro-batch of several sequences breaks the cap
    (the retry then ends there too), else ([], the retry's state at the next count, work): the
    retry must go on (verl's own schedule breaks the cap: no start)."""
    state = VerlRetry.start(tokens, costs, dp, cap, multiple_of, ranks)
    first, work, _ = state.try_count(tokens, costs, cap)
    if first is not None:
        return [("verl", first), ("verl_retry", first)], None, KK_SPLIT_WORK * work
    state.k += multiple_of
    return [], state, KK_SPLIT_WORK * work


def resume_verl_retry(
    tokens: list[int], costs: list[int], cap: int | None, multiple_of: int, state: VerlRetry,
    work_budget: int, hopeless: Hopeless, deadline: float | None,
) -> tuple[Schedule | None, int, str]:
    """verl's retry from ``state`` (left by :func:`start_verl`, or by a retry the budget cut)
    within ``work_budget`` step units, stopped once no count from there on can beat the
    incumbent. Returns (schedule or None, work, how it ended)."""
    sched, work, how = state.retry(tokens, costs, cap, multiple_of, work_budget // KK_SPLIT_WORK,
                                   deadline, _CLOCK_MARGIN * KK_SPLIT_WORK / CANDIDATES_PER_SECOND,
                                   lambda k: hopeless(k, True))
    return sched, KK_SPLIT_WORK * work, how


#: Cost model in the step search's work units (candidate evaluations, ~67 ns each at
#: ``CANDIDATES_PER_SECOND``), measured on the loaded 2-core machine: first-fit per sequence,
#: Karmarkar-Karp per item per doubling of its item and bin counts (its heap and its merges),
#: per form, and pairs scored by prime-rl's refinement per unit (numpy, ~20-50 ns a pair).
#: First-fit (its max-tree stops at the first unchanged ancestor) and the split: 3.4 us a
#: sequence at n=65,536 under a load of 2.4, ~8 us at 4.5.
FIT_WORK = 60
#: The equal-count form (ranks of sequences, of micro-batches): 0.3-0.7 us per item per
#: doubling at n <= 4096 under load 2.5; 0.045 s at n=65,536, dp=1024 and 0.41 s at
#: n=262,144, dp=2048 under load 1.6 (0.1 and 0.2 us).
KK_EQUAL_WORK = 3
#: verl's per-rank split (free counts, 2**k-wide merges), in units per unit of
#: :func:`~seqpart.heuristics.trainer_baselines.split_work` (an item per doubling, plus 125 a
#: call). Measured on an idle machine: 1.0-4.0 units per item per doubling from 128 to 4096
#: items a rank into 2-64 bins, ~300-450 units a call at 8 items (4-7 units under a load of
#: 2); charged 500. So the estimate is 1.0-4.0x the idle time, never below it. Charged at the
#: loaded end (8 units a doubling), verl's retry at n=262,144, dp=1,024 (1,024 splits of 256
#: items, 0.67 s) outgrew its share of a 5 s budget and was cut.
KK_SPLIT_WORK = 4
REFINE_PAIRS = 2
#: The clock's view of a split: ``KK_SPLIT_WORK`` is about the idle cost, and one split of
#: 2048 items took up to 5.2x this estimate at load ~4.6; the safety net allows for that.
_CLOCK_MARGIN = 6


def _kk_work(items: int, bins: int, equal: bool = False) -> int:
    """Karmarkar-Karp's estimated work: a heap over the items, merges of ``bins``-wide states;
    the equal-count form merges ``items / bins`` blocks."""
    if equal:
        return KK_EQUAL_WORK * items * (items // max(bins, 1)).bit_length()
    return KK_SPLIT_WORK * split_work(items, bins)


@dataclass
class OpenEnded:
    """The trainers' open-ended parts not run to their end yet (prime-rl's refinement, verl's
    retry), how each was last stopped ("work budget" or "clock"), and the trainers whose
    set-up the clock left out (``skipped``)."""

    prime: PrimeRefinement | None = None
    retry: VerlRetry | None = None
    stopped: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def not_run(self) -> list[str]:
        """The trainers' schedulers (``TRAINER_SCHEDULERS`` names) not run to their end."""
        return sorted({*self.skipped, *self.stopped})

    def notes(self) -> list[str]:
        out = []
        if "prime_rl" in self.stopped:
            out.append(f"trainer start prime_rl: its swap refinement was stopped by the "
                       f"{self.stopped['prime_rl']}; started from the partly refined schedule")
        if "verl_retry" in self.stopped and self.retry is not None:
            out.append(f"trainer start verl_retry: its retry was stopped by the "
                       f"{self.stopped['verl_retry']} (at count {self.retry.k})")
        return out


def run_trainer_starts(
    inst: StepInstance, work_budget: int | None, deadline: float | None, hopeless: Hopeless,
    take: Callable[[str, Schedule], None], open_share: int | None = None,
) -> tuple[list[str], int, OpenEnded]:
    """Every trainer's schedule, handed to ``take(name, schedule)`` (raw: the caller validates)
    as soon as it is made, so that ``hopeless`` sees it: Megatron-LM's (always), verl's first
    count, slime's two, prime-rl's set-up, then the open-ended parts (:func:`finish_open_ended`)
    with at most ``open_share`` of the work (None: all that is left of ``work_budget``; None:
    no limit). The set-ups are cheap (O(n log n)) and bounded: each runs unless the clock
    says it would end past ``deadline`` (their estimated work is charged, so with the clock
    dropped they always run and the plan stays the same on every machine); one whose count
    cannot beat what ``take`` was given (``hopeless``) is not built. Returns (notes naming the
    trainers not run, work, the open-ended parts left: resume them with
    :func:`finish_open_ended`)."""
    tokens, costs = inst.tokens.tolist(), inst.costs
    n, dp, cap, mo = inst.n, inst.dp_size, inst.cap, inst.multiple_of
    left = 10**18 if work_budget is None else work_budget
    take("trainer:megatron", megatron_schedule(tokens, dp, cap, mo))
    spent, state, skipped = n, OpenEnded(), []

    def fits(names: list[str], work: int) -> bool:
        late = _late(deadline, work)
        skipped.extend(names if late else [])
        return not late

    equal = _kk_work(n, dp, True)
    if fits(["verl", "verl_retry"], equal + dp * _kk_work(-(-n // dp), -(-_k_estimate(inst) // dp))):
        found, state.retry, work = start_verl(tokens, costs, dp, cap, mo, kk_ranks(inst, equal=True))
        spent += equal + work
        for name, sched in found:
            take(f"trainer:{name}", sched)
    fit = _fit_work(inst)
    if fits(["slime_rr", "slime_kk"], fit):
        for name, sched in slime_starts(tokens, costs, dp, cap, mo):
            take(f"trainer:{name}", sched)
        spent += fit
    if fits(["prime_rl"], fit):
        state.prime = prime_rl_start(tokens, costs, dp, cap, mo, hopeless)
        spent += fit
    share = left - spent if open_share is None else min(left - spent, open_share)
    spent += finish_open_ended(inst, state, max(0, share), deadline, hopeless, take)
    state.skipped = skipped
    notes = [f"trainer starts not run (no time left on the clock): {', '.join(skipped)}"]
    return notes if skipped else [], spent, state


def finish_open_ended(
    inst: StepInstance, state: OpenEnded, work_budget: int, deadline: float | None,
    hopeless: Hopeless, take: Callable[[str, Schedule], None],
) -> int:
    """prime-rl's refinement, then verl's retry, from where ``state`` left them, within
    ``work_budget``; each schedule (a cut refinement's too: still a valid start) goes to
    ``take``. Each is dropped once it cannot beat the incumbent (``hopeless``). Returns the
    work."""
    spent = 0
    if state.prime is not None:
        m = len(state.prime.groups[0])
        if hopeless(m, False):
            state.prime, _ = None, state.stopped.pop("prime_rl", None)
        else:
            sched, work, how = state.prime.refine(work_budget * REFINE_PAIRS, deadline)
            spent += work // REFINE_PAIRS
            done = how == "done"
            take("trainer:prime_rl" + ("" if done else " (refinement cut short)"), sched)
            if done:
                state.prime, _ = None, state.stopped.pop("prime_rl", None)
            else:
                state.stopped["prime_rl"] = how
    if state.retry is not None:
        tokens, costs = inst.tokens.tolist(), inst.costs
        sched, work, how = resume_verl_retry(tokens, costs, inst.cap, inst.multiple_of,
                                             state.retry, work_budget - spent, hopeless, deadline)
        spent += work
        if sched is not None:
            take("trainer:verl_retry", sched)
        if how in ("work budget", "clock"):
            state.stopped["verl_retry"] = how
        else:
            state.retry, _ = None, state.stopped.pop("verl_retry", None)
    return spent


def _late(deadline: float | None, work: int) -> bool:
    """The clock (a safety net) says ``work`` would end past ``deadline``."""
    return deadline is not None and time.perf_counter() + work / CANDIDATES_PER_SECOND > deadline


def _k_estimate(inst: StepInstance) -> int:
    return max(1, -(-int(inst.tokens.sum()) // inst.cap) if inst.cap is not None else 1)


def _fit_work(inst: StepInstance) -> int:
    return FIT_WORK * inst.n + _kk_work(_k_estimate(inst), inst.dp_size, True)


def as_start(sched: Schedule, inst: StepInstance) -> tuple[int, np.ndarray] | None:
    """(m, mb_of) of a trainer's schedule when it keeps the contract, else None: the rules of
    :func:`~seqpart.solver.step.model.find_schedule_violations` (``dp_size`` ranks of ``m``
    micro-batches, ``m`` a multiple of ``multiple_of``, none empty, every index once, none over
    the cap but an over-cap sequence alone), vectorised for the lists of ints the trainers here
    make (that validator walks every nested list: ~0.4 s a schedule at n=262,144). The plan
    itself is still checked by the validator."""
    n = inst.n
    if len(sched) != inst.dp_size or not sched[0] or len(sched[0]) % inst.multiple_of:
        return None
    m = len(sched[0])
    if any(len(rank) != m for rank in sched):
        return None
    flat = [mb for rank in sched for mb in rank]
    sizes = np.fromiter((len(mb) for mb in flat), dtype=np.int64, count=len(flat))
    if sizes.min() == 0 or int(sizes.sum()) != n:
        return None
    idx = np.fromiter(itertools.chain.from_iterable(flat), dtype=np.int64, count=n)
    if idx.min() < 0 or idx.max() >= n:
        return None
    mb_of = np.full(n, -1, dtype=np.int64)
    mb_of[idx] = np.repeat(np.arange(len(flat), dtype=np.int64), sizes)
    if (mb_of < 0).any():  # an index twice, so another never
        return None
    if inst.cap is not None:
        loads = np.add.reduceat(np.asarray(inst.tokens, dtype=np.int64)[idx],
                                np.cumsum(sizes) - sizes)
        if ((loads > inst.cap) & (sizes > 1)).any():
            return None
    return m, mb_of


def trainer_starts(inst: StepInstance) -> list[tuple[str, Schedule]]:
    """Every trainer's schedule that can be valid, each run to the end (for tests and studies:
    the same schedules as ``seqpart.heuristics.trainer_baselines``, order within a rank aside)."""
    out: list[tuple[str, Schedule]] = []
    run_trainer_starts(inst, None, None, lambda m, onwards: False,
                       lambda name, sched: out.append((name, sched)))
    return [(name, sched) for name, sched in out if not name.endswith("cut short)")]
