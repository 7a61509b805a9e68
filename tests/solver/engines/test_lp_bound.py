"""The Gilmore-Gomory LP bound: never above the optimum, and proofs where counting fails."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seqpart.heuristics import load_lower_bound, min_bins_lower_bound
from seqpart.heuristics.bounds import load_lower_bound_packing
from seqpart.solver.engines.lp_bound import lp_infeasible, lp_load_bound
from seqpart.solver.options import Budget

from _brute import brute_force_min_max


def test_infeasibility_the_counting_bounds_miss() -> None:
    # Sum 57 under 3 bins of 19: L1 = L2 = 3, yet the 12 and both 10s need bins of their own
    # and the three 6s and the 7 cannot fill the room left (found by a random search).
    lengths = [10, 7, 6, 6, 12, 10, 6]
    assert min_bins_lower_bound(lengths, 19) <= 3
    assert brute_force_min_max(lengths, 3, 19) is None
    assert lp_infeasible(lengths, 3, 19)
    assert not lp_infeasible(lengths, 4, 19)


def test_proves_a_plan_optimal_above_the_packing_bound() -> None:
    lengths = [12, 8, 10, 7, 11, 12, 3]
    k = 3
    lb = load_lower_bound(lengths, k)
    packing = load_lower_bound_packing(lengths, k, lb, 30)
    opt = brute_force_min_max(lengths, k, None)
    assert (packing, opt) == (21, 22)
    assert lp_load_bound(lengths, lengths, k, None, lb, opt) == opt


def test_a_spent_budget_keeps_the_given_bound() -> None:
    lengths = [12, 8, 10, 7, 11, 12, 3]
    assert lp_load_bound(lengths, lengths, 3, None, 21, 22, Budget(0)) == 21


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=2, max_size=6),
    st.data(),
)
def test_lp_bound_never_exceeds_the_optimum(lengths: list[int], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(lengths)))
    cap = data.draw(st.one_of(st.none(), st.integers(max(lengths), sum(lengths))))
    quadratic = data.draw(st.booleans())
    costs = [x + x * x for x in lengths] if quadratic else list(lengths)
    opt = brute_force_min_max(lengths, k, cap, costs)
    if cap is not None and lp_infeasible(lengths, k, cap):
        assert opt is None  # an LP proof of infeasibility is never wrong
        return
    if opt is None:
        return
    lb = load_lower_bound(costs, k)
    bound = lp_load_bound(lengths, costs, k, cap, lb, opt)
    assert lb <= bound <= opt
