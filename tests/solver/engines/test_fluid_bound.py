"""The fluid LP bound: never above the optimum, whatever the costs, and above the token-room
bound where the heaviest items cannot be filled with small ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics import load_lower_bound
from seqpart.heuristics.bounds import load_lower_bound_token_room
from seqpart.solver import partition
from seqpart.solver.engines.lp_bound import _FluidLP, fluid_load_bound, heavy_clique
from seqpart.solver.engines.prove import NOTE_FLUID
from seqpart.solver.options import Budget

from _brute import brute_force_min_max


def test_proves_optimal_what_the_token_room_bound_leaves_open() -> None:
    # The 7 needs a micro-batch of its own at any load under 182 (it costs 119 of it), and
    # the small items cannot fill it without pushing the other micro-batch past the cap.
    lengths, k, cap = [3, 2, 5, 7, 4, 3], 2, 12
    costs = [10 * x + x * x for x in lengths]
    opt = brute_force_min_max(lengths, k, cap, costs)
    room = load_lower_bound_token_room(lengths, costs, k, cap, load_lower_bound(costs, k))
    assert (room, opt) == (179, 182)
    assert fluid_load_bound(lengths, costs, k, cap, room, opt) == opt


def test_no_budget_keeps_the_given_bound() -> None:
    lengths, costs = [3, 2, 5, 7, 4, 3], [39, 24, 75, 119, 56, 39]
    work = Budget(0)
    assert fluid_load_bound(lengths, costs, 2, 12, 179, 182, work) == 179 and work.used == 0


def test_costs_beyond_int64_keep_the_given_bound_exactly() -> None:
    lengths = [2**40 + i for i in range(20)]
    costs = [x * x for x in lengths]  # ~2**80: the int64 certificate cannot hold them
    work = Budget(10**6)
    assert fluid_load_bound(lengths, costs, 5, 5 * 2**40, max(costs), sum(costs), work) == max(costs)
    assert work.used == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=7), st.data())
def test_never_above_the_optimum(lengths: list[int], data: st.DataObject) -> None:
    n = len(lengths)
    k = data.draw(st.integers(1, min(n, 3)))
    cap = data.draw(st.integers(max(lengths), sum(lengths)))
    # Any costs: attention-like ones, and arbitrary ones (the LP never assumes a formula).
    if data.draw(st.booleans()):
        costs = [10 * x + x * x for x in lengths]
    else:
        costs = data.draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    opt = brute_force_min_max(lengths, k, cap, costs)
    if opt is None:
        return
    lo = load_lower_bound(costs, k)
    hi = opt + data.draw(st.integers(0, 30))  # any plan's load, not only the optimum's
    bound = fluid_load_bound(lengths, costs, k, cap, lo, hi)
    assert lo <= bound <= opt


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 50)), min_size=1, max_size=12),
       st.integers(20, 40), st.integers(1, 100))
def test_heavy_items_never_share(pairs: list[tuple[int, int]], cap: int, t: int) -> None:
    tokens, costs = [p[0] for p in pairs], [p[1] for p in pairs]
    heavy = heavy_clique(tokens, costs, cap, t)
    assert heavy and len(set(heavy)) == len(heavy)
    for x, i in enumerate(heavy):
        for j in heavy[x + 1:]:
            assert costs[i] + costs[j] > t or tokens[i] + tokens[j] > cap


#: A tight cap with the attention cost: the micro-batches holding the longest sequences must
#: leave tokens out, and only the few short sequences can fill them.
ATTENTION_BATCH = [12_000, 11_000, 10_500] + [3_000 + 37 * i for i in range(30)] + [400] * 10


def test_partition_raises_its_bound_with_it() -> None:
    lengths = ATTENTION_BATCH
    cap = -(-sum(lengths) // 6) + 200
    plan = partition(lengths, 6, cap, cost="attention", time_limit=0.3)
    assert NOTE_FLUID in plan.notes
    assert plan.lower_bound <= plan.max_load


def test_generated_columns_reach_the_full_lp() -> None:
    # Heavy bins start with the cheapest fillers only; pricing must bring in what the optimum
    # needs: started from the dearest fillers instead, it still ends at the full LP's bound.
    lengths, k, cap = ATTENTION_BATCH, 6, -(-sum(ATTENTION_BATCH) // 6) + 200
    costs = [24576 * x + x * x for x in lengths]
    heavy = heavy_clique(lengths, costs, cap, 2 * costs[2] - 1)
    assert len(heavy) == 3
    full = _FluidLP(lengths, costs, k, cap, heavy)
    full.first = len(full.light)
    want = full.bound(*full.solve(Budget(10**6), 10**6))
    lp = _FluidLP(lengths, costs, k, cap, heavy)
    lp.light, lp.mult, lp.tok, lp.cst = lp.light[::-1], lp.mult[::-1], lp.tok[::-1], lp.cst[::-1]
    assert lp.bound(*lp.solve(Budget(10**6), 10**6)) == want and lp.columns > lp.start
